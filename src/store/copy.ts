import type { CopyCompany, CopyLookup, CopyRun, CopySource, CopyTarget, PurchasesCopied, RunIds } from './copy-types.js';
import { mayBeCharged, type KeptPurchase } from './purchase.js';
import { num, numOrNull } from './ledger-sql.js';

/** `enrich ledger copy`: one store merged into another without buying or counting anything twice; each backend applies these pure rules per chunk. */

/** A lookup is taken when the target has none of the domain, or an older one. */
export const lookupWins = (source: CopyLookup, target: CopyLookup | null): boolean => target === null || source.checkedAt > target.checkedAt;

/**
 * A record is taken when the target holds none or an older one, by bought time: a generation is one store's own count
 * and means nothing across two. Never while a live target run is buying the company (its record must not be in the way).
 */
export function companyWins(source: Pick<CopyCompany, 'boughtAt'>, target: Pick<CopyCompany, 'boughtAt'> | null, buyingThere: boolean): boolean {
  if (buyingThere) return false;
  return target === null || source.boughtAt > target.boughtAt;
}

/**
 * Companies whose record was left to a live target run: their purchases are left too, even if the run ends meanwhile,
 * or a purchase would close over the target's open one with its record never taken, and the company be bought again.
 */
export class LeftBusy {
  private readonly left = new Set<string>();
  add(service: string, domain: string): void {
    this.left.add(`${service}\n${domain}`);
  }
  has(service: string, domain: string): boolean {
    return this.left.has(`${service}\n${domain}`);
  }
}

/** A taken record's generation is never below the target's: its runs order purchases by it and write only over an earlier one. */
export const copiedGeneration = (source: Pick<CopyCompany, 'generation'>, target: Pick<CopyCompany, 'generation'> | null): number => Math.max(source.generation, target?.generation ?? 0);

/**
 * What the copy does with one purchase, keyed by (service, domain, generation):
 * - add: the target has none: taken as is, an open one with its key and no owner, so the target's runs resume it;
 * - close: closed in the source (or only the source's key may be charged) while open in the target: credits count once, there;
 * - keep: the target's is further on; busy: a live target run is buying the company; same: copied before;
 * - conflict: closed in both, differently: the target's is kept, the source's credits reported, never added;
 * - unsettled: open in both under different possibly-charged keys: the target keeps its own, the source's is reported.
 */
export type PurchaseMove = 'add' | 'close' | 'keep' | 'busy' | 'same' | 'conflict' | 'unsettled';

export function purchaseMove(source: KeptPurchase, target: KeptPurchase | null, buyingThere: boolean): PurchaseMove {
  if (target !== null && samePurchase(source, target)) return 'same';
  // Nothing of a company a live target run is buying is taken: a generation added above its would stop its purchase
  // being the latest, the one a run resumes, so a possibly-charged key would never be resumed.
  if (buyingThere) return 'busy';
  if (target === null) return 'add';
  const sourceClosed = source.outcome !== 'open';
  const targetClosed = target.outcome !== 'open';
  if (sourceClosed && targetClosed) return 'conflict';
  if (sourceClosed && !targetClosed) return 'close';
  // Open in both: the source's key may have been charged and the target's cannot, so the target takes the source's (replayed free).
  if (!sourceClosed && !targetClosed && mayBeCharged(source)) {
    if (!mayBeCharged(target)) return 'close';
    if (source.intentKey !== target.intentKey) return 'unsettled';
  }
  return 'keep';
}

/** Keys retired as possibly charged once the source's purchase replaces the target's, plus the target's own dropped key. */
function unconfirmedAfter(source: KeptPurchase, target: KeptPurchase | null): number {
  const dropped = target !== null && mayBeCharged(target) && (source.outcome !== 'open' || source.intentKey !== target.intentKey) ? 1 : 0;
  return Math.max(source.unconfirmed, target?.unconfirmed ?? 0) + dropped;
}

function samePurchase(a: KeptPurchase, b: KeptPurchase): boolean {
  // The target may count more keys possibly charged than the source (one it dropped on the copy).
  return a.outcome === b.outcome && a.credits === b.credits && a.closedAt === b.closedAt && a.keyVersion === b.keyVersion && a.intentKey === b.intentKey && b.unconfirmed >= a.unconfirmed;
}

/** The purchase as the target keeps it: no owner (the target's runs take it over), its run's id there. */
export function copiedPurchase(source: KeptPurchase, target: KeptPurchase | null, ids: RunIds): KeptPurchase {
  return { ...source, ownerRun: null, run: mapRun(source.run, ids), unconfirmed: unconfirmedAfter(source, target) };
}

export const mapRun = (run: number | null, ids: RunIds): number | null => (run === null ? null : (ids.get(run) ?? null));

export function tally(counts: PurchasesCopied, move: PurchaseMove, source: KeptPurchase, target: KeptPurchase | null): void {
  if (move === 'add' || move === 'close') {
    if (source.outcome === 'open') counts.open++;
    else counts.closed++;
    counts.credits += source.credits - (target?.credits ?? 0);
    counts.unconfirmed += Math.max(0, unconfirmedAfter(source, target) - (target?.unconfirmed ?? 0));
  } else if (move === 'conflict') {
    counts.conflicts++;
    counts.conflictCredits += source.credits;
  } else if (move === 'busy') counts.busy++;
  else if (move === 'unsettled') counts.unsettled++;
}

export const noPurchases = (): PurchasesCopied => ({ closed: 0, open: 0, credits: 0, unconfirmed: 0, conflicts: 0, conflictCredits: 0, busy: 0, unsettled: 0 });

/** A run is the same in two stores when it started at the same moment, as the same process, on the same host. */
export const runKey = (r: Pick<CopyRun, 'startedAt' | 'pid' | 'host'>): string => `${r.startedAt} ${r.pid} ${r.host}`;

/** A run still marked running in the source is not running in the target (nothing there renews it), so it never looks alive. */
export function copiedRun(r: CopyRun): CopyRun {
  return r.status === 'running' ? { ...r, status: COPIED_RUNNING } : r;
}

/** The status of a run that was under way (or killed) in the store it was copied from. */
export const COPIED_RUNNING = 'unfinished (copied)';

export interface Copied extends PurchasesCopied {
  services: number;
  runs: number;
  lookups: number;
  companies: number;
}

/** Copies `source` into `target`, service by service (services are matched by name). */
export async function copyStore(source: CopySource, target: CopyTarget): Promise<Copied> {
  const total: Copied = { services: 0, runs: 0, lookups: 0, companies: 0, ...noPurchases() };
  for (const service of await source.services()) {
    total.services++;
    const { ids, added } = await target.runs(service, await source.runs(service));
    total.runs += added;
    for await (const rows of source.lookups(service)) total.lookups += await target.lookups(service, rows);
    for await (const rows of source.companies(service)) total.companies += await target.companies(service, rows, ids);
    for await (const rows of source.purchases(service)) {
      const counts = await target.purchases(service, rows, ids);
      for (const k of Object.keys(counts) as (keyof PurchasesCopied)[]) total[k] += counts[k];
    }
  }
  return total;
}

/** Rows per chunk: one transaction each, small enough for any server's lock table. */
export const COPY_CHUNK = 1_000;

/** The columns a copy moves, table by table. */
export const COPY_COLUMNS = {
  runs: `id, started_at, ended_at, pid, host, "user", tool, input_name, input_sha256, rows, dry_run, options, status, heartbeat_at, policy_now, credits, bought, reused`,
  lookups: 'domain, status, company, name, checked_at',
  companies: 'domain, name, record, bought_at, last_updated, idempotency_key, credits, generation, run',
  purchases: 'domain, generation, key_version, intent_key, uncertain, unconfirmed, error_code, lost_at, settle_ms, outcome, credits, owner_run, run, opened_at, closed_at, person, reserved',
};

/**
 * What a copied purchase replaces of the target's row: every column copied but its key, and whether a run here resumed its key (the
 * key is now the source's); who it is counted under stays that of the run here that held it, else becomes the source's, and so does its reservation.
 */
export const PURCHASE_UPDATE = `${COPY_COLUMNS.purchases
  .split(', ')
  .filter((c) => !['domain', 'generation', 'person', 'reserved'].includes(c))
  .map((c) => `${c} = excluded.${c}`)
  .join(', ')}, resumed = 0, person = COALESCE(purchases.person, excluded.person)`;

/** A read of the store being copied: `$n` placeholders (store/ledger-sql.ts), rows as objects. */
export type CopyRead = (text: string, params: unknown[]) => Promise<Record<string, unknown>[]>;

/**
 * A store read whole for a copy, in the one snapshot transaction its backend began (one moment, whatever runs write meanwhile),
 * page by page in byte order: `collation` is the backend's name for it.
 */
export class SqlCopySource implements CopySource {
  constructor(
    private readonly read: CopyRead,
    private readonly collation: string,
    readonly end: () => Promise<void>,
  ) {}

  async services(): Promise<string[]> {
    return (await this.read('SELECT name FROM services ORDER BY id', [])).map((r) => String(r['name']));
  }

  async runs(service: string): Promise<CopyRun[]> {
    return (await this.read(`SELECT ${COPY_COLUMNS.runs} FROM runs WHERE service = ${SERVICE} ORDER BY id`, [service])).map(toCopyRun);
  }

  lookups(service: string): AsyncGenerator<CopyLookup[]> {
    return this.pages('lookups', service, toCopyLookup);
  }

  companies(service: string): AsyncGenerator<CopyCompany[]> {
    return this.pages('companies', service, toCopyCompany);
  }

  purchases(service: string): AsyncGenerator<KeptPurchase[]> {
    return this.pages('purchases', service, toKept);
  }

  /** A table's rows of `service` in key order: by domain, and a purchase's by its generation then. */
  private async *pages<T>(table: 'lookups' | 'companies' | 'purchases', service: string, of: (r: Record<string, unknown>) => T): AsyncGenerator<T[]> {
    const domain = `domain COLLATE ${this.collation}`;
    const after = `CAST($2 AS text) COLLATE ${this.collation}`;
    const [key, order] = table === 'purchases' ? [`(${domain}, generation) > (${after}, CAST($3 AS int))`, `${domain}, generation`] : [`${domain} > ${after}`, domain];
    for (let last: unknown[] = table === 'purchases' ? ['', 0] : ['']; ; ) {
      const rows = await this.read(`SELECT ${COPY_COLUMNS[table]} FROM ${table} WHERE service = ${SERVICE} AND ${key} ORDER BY ${order} LIMIT ${COPY_CHUNK}`, [service, ...last]);
      if (rows.length === 0) return;
      yield rows.map(of);
      const r = rows[rows.length - 1] as Record<string, unknown>;
      last = [r['domain'], num(r['generation'])].slice(0, last.length);
    }
  }
}

const SERVICE = '(SELECT id FROM services WHERE name = $1)';

// Rows as both backends return them (snake_case columns).

export function toCopyRun(r: Record<string, unknown>): CopyRun {
  return {
    id: num(r['id']),
    startedAt: num(r['started_at']),
    endedAt: numOrNull(r['ended_at']),
    pid: num(r['pid']),
    host: String(r['host']),
    user: (r['user'] as string | null) ?? null,
    tool: String(r['tool']),
    inputName: (r['input_name'] as string | null) ?? null,
    inputSha256: (r['input_sha256'] as string | null) ?? null,
    rows: numOrNull(r['rows']),
    dryRun: num(r['dry_run']) === 1,
    options: (r['options'] as string | null) ?? null,
    status: String(r['status']),
    heartbeatAt: numOrNull(r['heartbeat_at']),
    policyNow: numOrNull(r['policy_now']),
    credits: num(r['credits']),
    bought: num(r['bought']),
    reused: num(r['reused']),
  };
}

export function toKept(r: Record<string, unknown>): KeptPurchase {
  return {
    domain: String(r['domain']),
    generation: num(r['generation']),
    keyVersion: num(r['key_version']),
    intentKey: (r['intent_key'] as string | null) ?? null,
    uncertain: num(r['uncertain']) === 1,
    unconfirmed: num(r['unconfirmed']),
    errorCode: (r['error_code'] as string | null) ?? null,
    lostAt: numOrNull(r['lost_at']),
    settleMs: numOrNull(r['settle_ms']),
    outcome: r['outcome'] as KeptPurchase['outcome'],
    credits: num(r['credits']),
    ownerRun: numOrNull(r['owner_run']),
    run: numOrNull(r['run']),
    openedAt: num(r['opened_at']),
    closedAt: numOrNull(r['closed_at']),
    person: (r['person'] as string | null | undefined) ?? null,
    reserved: num(r['reserved']),
    resumed: num(r['resumed']) === 1,
  };
}

export function toCopyCompany(r: Record<string, unknown>): CopyCompany {
  return {
    domain: String(r['domain']),
    name: String(r['name']),
    record: String(r['record']),
    boughtAt: num(r['bought_at']),
    lastUpdated: (r['last_updated'] as string | null) ?? null,
    idempotencyKey: (r['idempotency_key'] as string | null) ?? null,
    credits: num(r['credits']),
    generation: num(r['generation']),
    run: numOrNull(r['run']),
  };
}

export const toCopyLookup = (r: Record<string, unknown>): CopyLookup => ({
  domain: String(r['domain']),
  status: r['status'] as 'hit' | 'miss',
  company: (r['company'] as string | null) ?? null,
  name: (r['name'] as string | null) ?? null,
  checkedAt: num(r['checked_at']),
});

