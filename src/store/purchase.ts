import { ENRICH_PRICE, monthOf, roomOf, type CapRow, type Room } from './budget.js';
import type { Claim, EnrichEvent, HeldCompany, IntentEvent, Purchase, ReleaseEvent, StoreEvent, UnclaimEvent } from './types.js';

/**
 * The purchase rules, stated once: every backend (SQLite, PostgreSQL, the tests' memory store) asks
 * decideBatch inside its transaction and writes what it answers before it commits.
 * unclaimed: nothing sent under its key; claimed: an intent is on disk, a request may be in flight;
 * uncertain: an attempt may have been charged unseen; bought/missed/failed: closed.
 */
export type PurchaseState = 'unclaimed' | 'claimed' | 'uncertain' | 'bought' | 'missed' | 'failed';

/** A purchase as a backend keeps it: what the pipeline sees, and who holds it, and what it cost. */
export interface KeptPurchase extends Purchase {
  /** The live run that holds the claim, if any. */
  ownerRun: number | null;
  credits: number;
  /** The run that closed it (or last moved it). */
  run: number | null;
  openedAt: number;
  /** Who reserved it under a monthly budget (store/budget.ts), and the price it holds while an attempt may be charged. */
  person: string | null;
  reserved: number;
  /** A run took the key up after another run sent under it (a resume): only such keys, still unanswered, does `ledger release --all` give up. */
  resumed: boolean;
}

export function stateOf(p: Purchase): PurchaseState {
  if (p.outcome === 'hit') return 'bought';
  if (p.outcome === 'miss') return 'missed';
  if (p.outcome === 'failed') return 'failed';
  if (p.uncertain) return 'uncertain';
  return p.intentKey !== null ? 'claimed' : 'unclaimed';
}

/** An open purchase an attempt may have been sent under: its key may have been charged. */
export const mayBeCharged = (p: Purchase): boolean => p.outcome === 'open' && (p.intentKey !== null || p.uncertain);

/** Whether a held record is fresh by the buyer's rule (IntentEvent.freshSince). */
function heldFresh(held: HeldCompany, event: IntentEvent): boolean {
  if (event.freshSince === undefined) return false;
  return event.freshSince === null || held.boughtAt >= event.freshSince;
}

export interface ClaimInput {
  /** What the store holds of the company, and its purchase of the intent's generation. */
  held: HeldCompany | null;
  kept: KeptPurchase | null;
  event: IntentEvent;
  /** The run writing the intent (null: an import, which claims nothing from anyone). */
  run: number | null;
  now: number;
  /** Whether another run may still be sending under the intents it owns. */
  alive(run: number): boolean;
  /** Whose reservation a new claim is. */
  person: string | null;
  /** What the tightest monthly cap has left, read in this transaction (store/budget.ts); null: no cap applies. */
  room: Room | null;
  /** A prune moved the key epoch on since this run began (read in this transaction). */
  pruned?: boolean;
}

/** An intent's outcome: a claim to answer (and the purchase to write), or another live run holds it. */
export type ClaimDecision = { claim: Exclude<Claim, { kind: 'busy' }>; write: KeptPurchase | null; /** Credits newly reserved under the monthly caps. */ reserved?: number } | { busy: number };

/**
 * Writes the intent only if this run may buy: no other live run holds it open, and nothing (or nothing
 * fresh) was bought since the plan; a purchase moved on meanwhile is handed back to adopt. A company
 * held fresh is never bought again unless its open key may have been charged: only that key recovers it free.
 */
export function decideClaim({ held, kept, event, run, now, alive, person, room, pruned = false }: ClaimInput): ClaimDecision {
  if (held !== null && held.generation >= event.generation) return { claim: { kind: 'held', held }, write: null };
  if (held !== null && heldFresh(held, event) && (kept === null || !mayBeCharged(kept))) return { claim: { kind: 'held', held }, write: null };
  // A run that a prune passed by (paused past its lease meanwhile) derives keys and plans generations as before it: only a key already stored may still go.
  if (run !== null && pruned && kept?.intentKey !== event.key) return { claim: { kind: 'pruned' }, write: null };
  let tookOver = false;
  if (kept !== null) {
    const owner = kept.ownerRun;
    if (kept.outcome === 'open' && owner !== null && owner !== run && alive(owner)) return { busy: owner };
    tookOver = kept.intentKey !== null && owner !== run;
    if (kept.outcome !== 'open' || kept.keyVersion !== event.keyVersion || (kept.intentKey !== null && kept.intentKey !== event.key)) {
      return { claim: { kind: 'moved', purchase: publicPart(kept) }, write: null };
    }
  }
  // A key an attempt may have gone under keeps its reservation until settled; any other needs room for its price under every cap.
  const reserves = kept === null || !mayBeCharged(kept);
  const price = event.price ?? ENRICH_PRICE;
  if (reserves && room !== null && room.left < price) return { claim: { kind: 'capped', person: room.person, cap: room.cap }, write: null };
  const at = event.at ?? now;
  const write: KeptPurchase = {
    ...(kept ?? { domain: event.company, uncertain: false, unconfirmed: 0, errorCode: null, closedAt: null, credits: 0, run: null, openedAt: now, person: null, reserved: 0, resumed: false }),
    ...(reserves ? { person, reserved: price } : {}),
    generation: event.generation,
    keyVersion: event.keyVersion,
    intentKey: event.key,
    outcome: 'open',
    ownerRun: run,
    // From then the request may be in flight: a later settle counts from the latest such moment.
    lostAt: Math.max(kept?.lostAt ?? 0, at),
    settleMs: longest(kept?.settleMs, event.settleMs),
    resumed: kept !== null && (kept.resumed || (kept.ownerRun !== run && (kept.uncertain || kept.intentKey !== null))),
  };
  const settle = write.settleMs === null ? {} : { settleMs: write.settleMs };
  return { claim: tookOver ? { kind: 'ok', tookOver, ...settle } : { kind: 'ok', ...settle }, write, reserved: reserves ? price : 0 };
}

/** The purchase as the pipeline sees it. */
export function publicPart(k: KeptPurchase): Purchase {
  return { domain: k.domain, generation: k.generation, keyVersion: k.keyVersion, intentKey: k.intentKey, uncertain: k.uncertain, unconfirmed: k.unconfirmed, lostAt: k.lostAt, settleMs: k.settleMs, errorCode: k.errorCode, outcome: k.outcome, closedAt: k.closedAt };
}

/** The longer of two settles; null when neither is known. */
export function longest(a: number | null | undefined, b: number | null | undefined): number | null {
  return a == null ? (b ?? null) : b == null ? a : Math.max(a, b);
}

/** A purchase an imported journal names without an intent (0.1 wrote none): opened as it was then. */
export function importedPurchase(e: EnrichEvent, at: number): KeptPurchase {
  return { domain: e.company, generation: e.generation, keyVersion: e.keyVersion, intentKey: null, uncertain: false, unconfirmed: 0, lostAt: null, settleMs: null, errorCode: null, outcome: 'open', closedAt: null, ownerRun: null, credits: 0, run: null, openedAt: at, person: null, reserved: 0, resumed: false };
}

/** What an answer (or its absence) does to the purchase; null: nothing (absent, or a stale event). `run` null: an import, whose events are the past. */
export function applyOutcome(kept: KeptPurchase | null, e: EnrichEvent, run: number | null, now: number, alive: (run: number) => boolean = () => false, storeNow = now): KeptPurchase | null {
  const at = e.at ?? now;
  // A live run always wrote the intent first; an imported journal may have none.
  const p = kept ?? (run === null ? importedPurchase(e, at) : null);
  // A purchase is closed once: a late answer (a paused run's, taken over meanwhile, or the same
  // batch sent again after a lost connection) changes nothing, nor is its credit counted twice.
  if (p === null || p.outcome !== 'open') return null;
  const charged = e.charged ?? 0;
  let closedAt = at;
  if (run === null) {
    // An import never moves what a live run holds. Of a purchase not under the journal's key, only a bought answer closes it (the
    // company was bought), its own key then counted as possibly charged; any other answer is about the journal's key alone.
    // (A purchase uncertain with no key is a keyless journal's own.)
    const journals = p.keyVersion === e.keyVersion && (p.intentKey === null ? !p.uncertain || e.keyUsed === undefined : p.intentKey === e.keyUsed);
    if ((p.ownerRun !== null && alive(p.ownerRun)) || (!journals && e.status !== 'hit')) return null;
    // Possible charges not the journal's (a run's key, keys given up) may be this month's: closed by the past, they would leave this
    // month's caps. They are closed now, with the journal's credit.
    if (p.unconfirmed > 0 || (!journals && mayBeCharged(p))) closedAt = Math.max(at, storeNow);
    if (!journals) return { ...p, outcome: 'hit', intentKey: null, ownerRun: null, credits: p.credits + charged, run, closedAt, errorCode: null, unconfirmed: p.unconfirmed + (mayBeCharged(p) ? 1 : 0) };
  }
  if (e.status === 'hit' || e.status === 'miss') return { ...p, outcome: e.status, intentKey: null, ownerRun: null, credits: p.credits + charged, run, closedAt, errorCode: null };
  const code = e.code ?? 'error';
  if (e.final === true) return { ...p, outcome: 'failed', intentKey: null, ownerRun: null, errorCode: code, credits: p.credits + charged, run, closedAt };
  if (e.verdict === 'retired') {
    // Only this run's key, on a purchase still open and still this run's: a retire arriving after
    // another run took it over is stale and must not free it for a new key.
    if (p.keyVersion !== e.keyVersion || (run !== null && p.ownerRun !== run)) return null;
    return { ...p, keyVersion: e.keyVersion + 1, intentKey: null, uncertain: false, lostAt: null, settleMs: null, resumed: false, errorCode: code, unconfirmed: p.unconfirmed + (e.unconfirmed === true ? 1 : 0) };
  }
  // Kept: an attempt under the key may have been charged unseen.
  return e.lost === true ? { ...p, uncertain: true, errorCode: code, lostAt: at, settleMs: longest(p.settleMs, e.settleMs) } : { ...p, uncertain: true, errorCode: code };
}

/** This run is done with a purchase it could not finish: other runs may take it over now. */
export function applyRelease(kept: KeptPurchase | null, e: ReleaseEvent, run: number | null): KeptPurchase | null {
  if (kept === null || run === null || kept.generation !== e.generation || kept.ownerRun !== run || kept.outcome !== 'open') return null;
  return { ...kept, ownerRun: null };
}

/** An intent this run sent nothing under: no longer claimed, nothing under its key at risk. */
export function applyUnclaim(kept: KeptPurchase | null, e: UnclaimEvent, run: number | null): KeptPurchase | null {
  if (kept === null || kept.outcome !== 'open' || kept.keyVersion !== e.keyVersion || kept.intentKey !== e.key || kept.uncertain) return null;
  if (run !== null && kept.ownerRun !== run) return null;
  return { ...kept, intentKey: null, ownerRun: null, lostAt: null, settleMs: null };
}

/** The purchase's claim was taken by another live run: the backend says who holds it. */
export interface Busy {
  busy: number;
}

/** What a batch's transaction reads: purchases and holdings under its company locks; the team store rechecks caps under their own locks. */
export interface BatchReader {
  purchase(domain: string, generation: number): KeptPurchase | null;
  holding(domain: string): HeldCompany | null;
  caps(): readonly CapRow[];
  person(): string | null;
  alive(run: number): boolean;
  /** Whether a prune moved the key epoch on since the run began, read in the transaction (asked only for a run's claim). */
  pruned(): boolean;
}

/** A hit's record to keep: the event and the moment it was bought. */
export interface RecordWrite {
  event: EnrichEvent & { record: NonNullable<EnrichEvent['record']> };
  at: number;
}

/** What a batch does: an answer per event (in order), and the rows to write. */
export interface BatchDecision {
  answers: (Claim | Busy)[];
  /** Every purchase the batch moved on, once each, as the batch left it. */
  purchases: KeptPurchase[];
  /** A record per company bought, the newest generation's (a store keeps a newer one it holds). */
  records: RecordWrite[];
  /** What the batch's writes add under the caps this month (countedUnderCaps): under the store's, and under each person's. */
  underCaps: { all: number; byPerson: ReadonlyMap<string, number> };
  /** Credits newly reserved by the batch's claims. */
  reserved: number;
}

const OK_CLAIM: Claim = { kind: 'ok' };

/**
 * Credits a purchase counts under a cap in [since, until): its charges once closed, its reservation while
 * its key may be charged, plus keys retired as possibly charged. Must match budget.ts budgetUsedSql row for row.
 */
export function countedUnderCaps(p: KeptPurchase, since: number, until: number): number {
  if (p.outcome !== 'open') return p.closedAt !== null && p.closedAt >= since && p.closedAt < until ? p.credits + p.unconfirmed : 0;
  return (p.intentKey !== null || p.uncertain ? (p.reserved > 0 ? p.reserved : ENRICH_PRICE) : 0) + p.unconfirmed;
}

const purchaseKey = (domain: string, generation: number): string => `${generation} ${domain}`;

/** Whether a record bought at `at` replaces the one held: a newer generation's, or the same one's bought no earlier (an imported journal's past never replaces it). The stores' record writes say the same in SQL. */
export const replacesHeld = (generation: number, at: number, held: { generation: number; boughtAt: number }): boolean =>
  generation > held.generation || (generation === held.generation && at >= held.boughtAt);

/**
 * One batch's events in order, each seeing the earlier ones' writes; `now`: the store's clock, or each event's own (an import: `run` null,
 * claiming nothing, with `storeNow` the store's clock).
 */
export function decideBatch(events: readonly StoreEvent[], read: BatchReader, run: number | null, now: number | readonly number[], storeNow = typeof now === 'number' ? now : 0): BatchDecision {
  const written = new Map<string, KeptPurchase>();
  /** Records the batch bought, the newest generation's of each company. */
  const held = new Map<string, HeldCompany>();
  const records = new Map<string, RecordWrite>();
  // What the batch's own writes changed under the caps since its transaction read them: the store's, and each person's.
  let delta = 0;
  const byPerson = new Map<string, number>();
  let caps: readonly CapRow[] | null = null;
  const answers: (Claim | Busy)[] = [];

  const kept = (domain: string, generation: number): KeptPurchase | null => written.get(purchaseKey(domain, generation)) ?? read.purchase(domain, generation);
  // The store keeps a record of a newer generation than one the batch bought (the write's guard).
  const holding = (domain: string): HeldCompany | null => {
    const own = held.get(domain);
    const stored = read.holding(domain);
    return own === undefined || (stored !== null && !replacesHeld(own.generation, own.boughtAt, stored)) ? stored : own;
  };
  const save = (before: KeptPurchase | null, after: KeptPurchase | null, at: number): void => {
    if (after === null) return;
    written.set(purchaseKey(after.domain, after.generation), after);
    if (run === null) return;
    const { since, until } = monthOf(at);
    for (const [p, sign] of [[before, -1], [after, 1]] as const) {
      if (p === null) continue;
      const n = sign * countedUnderCaps(p, since, until);
      if (n === 0) continue;
      delta += n;
      if (p.person !== null) byPerson.set(p.person, (byPerson.get(p.person) ?? 0) + n);
    }
  };
  /** A given-up key's earlier possible charges follow the purchase to whoever buys it again (docs/budgets.md): that person's cap needs room for them too. */
  const room = (before: KeptPurchase | null, person: string | null): Room | null => {
    if (run === null) return null;
    caps ??= read.caps();
    const brought = before !== null && before.person !== person ? before.unconfirmed : 0;
    return roomOf(caps.map((c) => ({ ...c, held: c.held + (c.person === '' ? delta : (byPerson.get(c.person) ?? 0) + (c.person === person ? brought : 0)) })));
  };
  let reservedNew = 0;

  events.forEach((event, i) => {
    const at = typeof now === 'number' ? now : (now[i] as number);
    if (event.type === 'match') {
      answers.push(OK_CLAIM);
      return;
    }
    const before = kept(event.company, event.generation);
    if (event.type === 'intent') {
      const person = run === null ? null : read.person();
      const decision = decideClaim({ held: holding(event.company), kept: before, event, run, now: at, alive: (r) => r === run || read.alive(r), person, room: room(before, person), pruned: run !== null && read.pruned() });
      if ('busy' in decision) {
        answers.push(decision);
        return;
      }
      reservedNew += decision.reserved ?? 0;
      save(before, decision.write, at);
      answers.push(decision.claim);
      return;
    }
    answers.push(OK_CLAIM);
    if (event.type === 'enrich') {
      if (event.status === 'hit' && event.record !== undefined) {
        const bought = event.at ?? at;
        const last = records.get(event.company);
        if (last === undefined || replacesHeld(event.generation, bought, { generation: last.event.generation, boughtAt: last.at })) records.set(event.company, { event: event as RecordWrite['event'], at: bought });
        const was = held.get(event.company);
        if (was === undefined || replacesHeld(event.generation, bought, was)) {
          held.set(event.company, { domain: event.company, name: event.record.name, boughtAt: bought, lastUpdated: event.record.last_updated || null, generation: event.generation, credits: event.charged ?? 0 });
        }
      }
      save(before, applyOutcome(before, event, run, at, (r) => r === run || read.alive(r), storeNow), at);
    } else if (event.type === 'release') save(before, applyRelease(before, event, run), at);
    else save(before, applyUnclaim(before, event, run), at);
  });
  return { answers, purchases: [...written.values()], records: [...records.values()], underCaps: { all: delta, byPerson }, reserved: reservedNew };
}
