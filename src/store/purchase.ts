import { ENRICH_PRICE, type Room } from './budget.js';
import type { Claim, EnrichEvent, HeldCompany, IntentEvent, Purchase, ReleaseEvent, UnclaimEvent } from './types.js';

/**
 * The purchase rules: how an event moves one purchase (a company's generation) on, and what an
 * intent may claim. Pure: SQLite and the tests' memory store read the purchase, ask these, and
 * write what they answer in the same transaction. PostgreSQL restates them in SQL
 * (store/postgres/claim-sql.ts, writer.ts), held to these by test/purchase-equivalence.test.ts.
 * A purchase is in one of these states:
 *
 * - unclaimed: open, no intent under its key version: nothing can have been sent under it;
 * - claimed: an intent is on disk (`intentKey`): a request may be in flight under it;
 * - uncertain: an attempt under the key may have been charged unseen (a lost answer);
 * - bought / missed: the service's answer closed it (a record, or no match);
 * - failed: closed without a record: a final error (a 422, an unusable paid answer).
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
  /** Who the run is, whose reservation a new one is. */
  person: string | null;
  /** What the tightest monthly cap has left, read in this transaction (store/budget.ts); null: no cap applies. */
  room: Room | null;
}

/** An intent's outcome: a claim to answer (and the purchase to write), or another live run holds it. */
export type ClaimDecision = { claim: Exclude<Claim, { kind: 'busy' }>; write: KeptPurchase | null; /** Credits newly reserved under the monthly caps. */ reserved?: number } | { busy: number };

/**
 * The intent is written only if this run may buy: no other live run holds the purchase open, no
 * run has bought this generation (or a record fresh by the buyer's rule) since the plan was made.
 * A purchase another run moved on since this one read it (a new key version, an outcome) is handed
 * back for the caller to adopt. A company held fresh is never bought again, whatever the plan
 * believed, unless its open purchase's key may have been charged: only that key recovers it free.
 */
export function decideClaim({ held, kept, event, run, now, alive, person, room }: ClaimInput): ClaimDecision {
  if (held !== null && held.generation >= event.generation) return { claim: { kind: 'held', held }, write: null };
  if (held !== null && heldFresh(held, event) && (kept === null || !mayBeCharged(kept))) return { claim: { kind: 'held', held }, write: null };
  let tookOver = false;
  if (kept !== null) {
    const owner = kept.ownerRun;
    if (kept.outcome === 'open' && owner !== null && owner !== run && alive(owner)) return { busy: owner };
    tookOver = kept.intentKey !== null && owner !== run;
    if (kept.outcome !== 'open' || kept.keyVersion !== event.keyVersion || (kept.intentKey !== null && kept.intentKey !== event.key)) {
      return { claim: { kind: 'moved', purchase: publicPart(kept) }, write: null };
    }
  }
  // A purchase an attempt may already have gone under holds its reservation still (its price is
  // counted until settled); any other needs room for its price under every cap.
  const reserves = kept === null || !mayBeCharged(kept);
  const price = event.price ?? ENRICH_PRICE;
  if (reserves && room !== null && room.left < price) return { claim: { kind: 'capped', person: room.person, cap: room.cap }, write: null };
  const at = event.at ?? now;
  const write: KeptPurchase = {
    ...(kept ?? { domain: event.company, uncertain: false, unconfirmed: 0, errorCode: null, closedAt: null, credits: 0, run: null, openedAt: now, person: null, reserved: 0 }),
    ...(reserves ? { person, reserved: price } : {}),
    generation: event.generation,
    keyVersion: event.keyVersion,
    intentKey: event.key,
    outcome: 'open',
    ownerRun: run,
    // From then the request may be in flight: a later settle counts from the latest such moment.
    lostAt: Math.max(kept?.lostAt ?? 0, at),
  };
  return { claim: tookOver ? { kind: 'ok', tookOver } : { kind: 'ok' }, write, reserved: reserves ? price : 0 };
}

/** The purchase as the pipeline sees it. */
export function publicPart(k: KeptPurchase): Purchase {
  return { domain: k.domain, generation: k.generation, keyVersion: k.keyVersion, intentKey: k.intentKey, uncertain: k.uncertain, unconfirmed: k.unconfirmed, lostAt: k.lostAt, errorCode: k.errorCode, outcome: k.outcome, closedAt: k.closedAt };
}

/** A purchase an imported journal names without an intent (0.1 wrote none): opened as it was then. */
export function importedPurchase(e: EnrichEvent, at: number): KeptPurchase {
  return { domain: e.company, generation: e.generation, keyVersion: e.keyVersion, intentKey: null, uncertain: false, unconfirmed: 0, lostAt: null, errorCode: null, outcome: 'open', closedAt: null, ownerRun: null, credits: 0, run: null, openedAt: at, person: null, reserved: 0 };
}

/**
 * What an answer (or its absence) does to the purchase; null: nothing (it is not there, or the
 * event is stale). `run`: the run that got it (null: an import, whose events are the past).
 */
export function applyOutcome(kept: KeptPurchase | null, e: EnrichEvent, run: number | null, now: number): KeptPurchase | null {
  const at = e.at ?? now;
  // A live run always wrote the intent first; an imported journal may have none.
  const p = kept ?? (run === null ? importedPurchase(e, at) : null);
  if (p === null) return null;
  const charged = e.charged ?? 0;
  // A purchase is closed once: a late answer (a paused run's, taken over meanwhile, or the same
  // batch sent again after a lost connection) changes nothing, nor is its credit counted twice.
  if (p.outcome !== 'open') return null;
  if (e.status === 'hit' || e.status === 'miss') return { ...p, outcome: e.status, intentKey: null, ownerRun: null, credits: p.credits + charged, run, closedAt: at, errorCode: null };
  const code = e.code ?? 'error';
  if (e.final === true) return { ...p, outcome: 'failed', intentKey: null, ownerRun: null, errorCode: code, credits: p.credits + charged, run, closedAt: at };
  if (e.verdict === 'retired') {
    // Proven uncharged (or retired on the settle rule: `unconfirmed`). Only the key this run sent
    // under, on a purchase still open and still this run's: a run retires a key before it lets the
    // purchase go, so a retire arriving once another run has taken it over (and perhaps sent under
    // that key, perhaps handed it back since) is stale, and must not free it for a new key.
    if (p.keyVersion !== e.keyVersion || (run !== null && p.ownerRun !== run)) return null;
    return { ...p, keyVersion: e.keyVersion + 1, intentKey: null, uncertain: false, lostAt: null, errorCode: code, unconfirmed: p.unconfirmed + (e.unconfirmed === true ? 1 : 0) };
  }
  // Kept: an attempt under the key may have been charged unseen.
  return { ...p, uncertain: true, errorCode: code, lostAt: e.lost === true ? at : p.lostAt };
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
  return { ...kept, intentKey: null, ownerRun: null, lostAt: null };
}
