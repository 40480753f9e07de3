import type { CompanyRecord } from '../../api/types.js';
import { UsageError } from '../../errors.js';
import { fileIdentity } from '../../io/paths.js';
import type { CopySource, CopyTarget } from '../copy-types.js';
import type { JournalTarget } from '../import-journal.js';
import type { AtRisk, HeldRecord, LedgerOpen, LedgerStore, OpenSpend, Pruned, RunRow, ServiceHoldings, Spend, SpendBy, SpendRow, Watch } from '../ledger-types.js';
import { hostIdentity } from '../host.js';
import { LEASE_MS } from './connection.js';
import { SqliteCopySource, SqliteCopyTarget } from './copy.js';
import { explainDamage } from './errors.js';
import { Store } from './store.js';
import { budgetLinesSql, budgetView, monthOf, serviceMonthSql, type BudgetView } from '../budget.js';

export type { AtRisk, HeldRecord, Pruned, RunRow, ServiceHoldings } from '../ledger-types.js';

const num = (v: unknown): number => Number(v ?? 0);

export function holdings(store: Store): ServiceHoldings[] {
  const rows = store.db
    .prepare(
      `SELECT s.name,
         (SELECT count(*) FROM companies c WHERE c.service = s.id),
         (SELECT count(*) FROM lookups l WHERE l.service = s.id),
         (SELECT count(*) FROM lookups l WHERE l.service = s.id AND l.status = 'miss'),
         (SELECT coalesce(sum(credits), 0) FROM purchases p WHERE p.service = s.id),
         (SELECT count(*) FROM runs r WHERE r.service = s.id),
         (SELECT count(*) FROM purchases p WHERE p.service = s.id AND p.outcome = 'open' AND (p.intent_key IS NOT NULL OR p.uncertain = 1)),
         (SELECT coalesce(sum(unconfirmed), 0) FROM purchases p WHERE p.service = s.id),
         (SELECT min(bought_at) FROM companies c WHERE c.service = s.id),
         (SELECT max(bought_at) FROM companies c WHERE c.service = s.id)
       FROM services s ORDER BY s.id`,
    )
    .raw(true)
    .all() as unknown[][];
  return rows.map((r) => ({
    service: String(r[0]),
    companies: num(r[1]),
    lookups: num(r[2]),
    misses: num(r[3]),
    credits: num(r[4]),
    runs: num(r[5]),
    open: num(r[6]),
    unconfirmed: num(r[7]),
    oldest: r[8] === null ? null : num(r[8]),
    newest: r[9] === null ? null : num(r[9]),
  }));
}

/** The most recent runs, newest first; credits summed from the purchases each closed, so a killed run still counts right. */
export function runs(store: Store, limit: number): RunRow[] {
  const rows = store.db
    .prepare(
      `SELECT r.id, s.name, r.started_at, r.ended_at, r.input_name, r.rows, r.dry_run, r.status, r.pid, r.host,
         (SELECT coalesce(sum(credits), 0) FROM purchases p WHERE p.run = r.id),
         (SELECT count(*) FROM purchases p WHERE p.run = r.id AND p.outcome = 'hit'),
         r.reused, r.user
       FROM runs r JOIN services s ON s.id = r.service ORDER BY r.id DESC LIMIT ?`,
    )
    .raw(true)
    .all(limit) as unknown[][];
  return rows.map((r) => ({
    id: num(r[0]),
    service: String(r[1]),
    startedAt: num(r[2]),
    endedAt: r[3] === null ? null : num(r[3]),
    input: r[4] === null ? null : String(r[4]),
    rows: r[5] === null ? null : num(r[5]),
    dryRun: r[6] === 1,
    // Marked running and never ended: under way, or killed (not probed here).
    status: String(r[7]) === 'running' && r[3] === null ? 'running or killed' : String(r[7]),
    credits: num(r[10]),
    bought: num(r[11]),
    reused: num(r[12]),
    user: r[13] === null || r[13] === '' ? null : String(r[13]),
    host: String(r[9]),
  }));
}

/** Every record held, service by service, oldest first; a damaged row is passed over. */
export function* records(store: Store, service: string | undefined): Generator<HeldRecord> {
  const filter = service === undefined ? '' : 'WHERE s.name = ?';
  const statement = store.db
    .prepare(`SELECT s.name, c.bought_at, c.credits, c.generation, c.record FROM companies c JOIN services s ON s.id = c.service ${filter} ORDER BY s.id, c.bought_at, c.domain`)
    .raw(true);
  const rows = (service === undefined ? statement.iterate() : statement.iterate(service)) as IterableIterator<[string, number, number, number, string]>;
  for (const [name, boughtAt, credits, generation, text] of rows) {
    let record: CompanyRecord;
    try {
      record = JSON.parse(text) as CompanyRecord;
    } catch {
      continue;
    }
    if (record === null || typeof record !== 'object' || typeof record.domain !== 'string') continue;
    yield { service: name, boughtAt: num(boughtAt), credits: num(credits), generation: num(generation), record };
  }
}

const AT_RISK = "p.outcome = 'open' AND (p.intent_key IS NOT NULL OR p.uncertain = 1)";

/** Purchases whose paid call may have been charged without an answer seen: a credit each at most. */
export function atRisk(store: Store, domains: readonly string[]): AtRisk[] {
  const rows = store.db
    .prepare(`SELECT s.name, p.domain, p.generation, p.key_version, p.error_code, p.lost_at, p.owner_run, p.uncertain, p.resumed FROM purchases p JOIN services s ON s.id = p.service WHERE ${AT_RISK} ORDER BY s.id, p.domain`)
    .raw(true)
    .all() as [string, string, number, number, string | null, number | null, number | null, number, number][];
  const wanted = new Set(domains);
  // A purchase a live run is buying right now is in flight, not lost: never listed, never released.
  return rows
    .filter((r) => r[6] === null || !store.runAlive(r[6]))
    .filter((r) => wanted.size === 0 || wanted.has(r[1]))
    .map(([service, domain, generation, keyVersion, errorCode, lostAt, , uncertain, resumed]) => ({ service, domain, generation: num(generation), keyVersion: num(keyVersion), errorCode, lostAt: lostAt === null ? null : num(lostAt), tried: num(uncertain) === 1 && num(resumed) === 1 }));
}

/** How often a watched heartbeat is read again. */
const WATCH_POLL_MS = 500;

/**
 * Runs on other hosts whose heartbeat is ahead of our clock cannot be judged by its time: each is watched until it moves (alive)
 * or a lease passes (dead, as Store.runAlive then says), before `release` and `prune` ask which runs are alive.
 */
export async function watchSkewedRuns(store: Store, sleep: (ms: number) => Promise<void>, note: (runs: number, forMs: number) => void): Promise<void> {
  const read = (): Map<number, number> =>
    new Map(
      store.db
        .prepare("SELECT id, heartbeat_at FROM runs WHERE status = 'running' AND host != ? AND heartbeat_at > ?")
        .raw(true)
        .all(store.host, store.options.now()) as [number, number][],
    );
  const ahead = read();
  if (ahead.size === 0) return;
  note(ahead.size, LEASE_MS);
  for (const id of ahead.keys()) store.runAlive(id);
  const started = store.options.monotonic();
  while (ahead.size > 0 && store.options.monotonic() - started <= LEASE_MS) {
    await sleep(WATCH_POLL_MS);
    const now = read();
    for (const [id, beat] of ahead) if (now.get(id) !== beat) ahead.delete(id);
  }
}

/** Gives up these purchases' keys: the next run buys under new ones, so a lost call that was charged is charged twice (the caller warns first). */
export function release(store: Store, purchases: readonly AtRisk[]): AtRisk[] {
  const services = new Map<string, number>();
  const released: AtRisk[] = [];
  store.db.transaction(() => {
    // Looked at again inside the transaction: a run may have claimed one since it was listed.
    const stillHeld = new Set(atRisk(store, []).map((p) => `${p.service} ${p.domain} ${p.generation}`));
    for (const p of purchases) {
      if (!stillHeld.has(`${p.service} ${p.domain} ${p.generation}`)) continue;
      let id = services.get(p.service);
      if (id === undefined) services.set(p.service, (id = store.serviceId(p.service)));
      const changed = store.db
        .prepare(
          `UPDATE purchases SET key_version = key_version + 1, intent_key = NULL, uncertain = 0, lost_at = NULL, settle_ms = NULL, resumed = 0, owner_run = NULL, unconfirmed = unconfirmed + 1
           WHERE service = ? AND domain = ? AND generation = ? AND key_version = ? AND outcome = 'open'`,
        )
        .run(id, p.domain, p.generation, p.keyVersion).changes;
      if (changed > 0) released.push(p);
    }
  })();
  return released;
}

/** Forgets records and lookups before `cutoff` (bought again when next named). Open purchases are never pruned: only their own key recovers a possible charge free. */
export function prune(store: Store, cutoff: number, dryRun: boolean): Pruned {
  const count = (sql: string): number => num((store.db.prepare(sql).raw(true).get(cutoff) as [number])[0]);
  const counts = (): Pruned => ({
    companies: count('SELECT count(*) FROM companies WHERE bought_at < ?'),
    lookups: count('SELECT count(*) FROM lookups WHERE checked_at < ?'),
    purchases: count("SELECT count(*) FROM purchases WHERE outcome != 'open' AND coalesce(closed_at, opened_at) < ?"),
  });
  if (dryRun) return counts();
  // One write transaction from the check to the new key epoch: a run registering meanwhile is refused here, or waits and reads the new epoch.
  return store.db.transaction(() => {
    // A run under way would buy under keys the prune may make repeat, or miss records it reuses.
    const live = (store.db.prepare("SELECT id FROM runs WHERE status = 'running'").raw(true).all() as [number][]).filter(([id]) => store.runAlive(id));
    if (live.length > 0) throw new UsageError(`a run is under way on this store (run ${live.map(([id]) => id).join(', ')}); prune when it has finished`);
    const result = counts();
    store.db.prepare('DELETE FROM companies WHERE bought_at < ?').run(cutoff);
    store.db.prepare('DELETE FROM lookups WHERE checked_at < ?').run(cutoff);
    store.db.prepare("DELETE FROM purchases WHERE outcome != 'open' AND coalesce(closed_at, opened_at) < ?").run(cutoff);
    if (result.purchases > 0) store.bumpKeyEpoch();
    return result;
  }).immediate();
}


/** SQL of the group each closed purchase's credits count in (SpendRow.group); `r` is the run that closed it. */
const GROUP: Record<SpendBy, string> = {
  month: "strftime('%Y-%m', p.closed_at / 1000, 'unixepoch')",
  person: "CASE WHEN r.id IS NULL THEN NULL ELSE coalesce(nullif(r.user, '') || '@', '') || r.host END",
  input: 'CASE WHEN r.id IS NULL THEN NULL ELSE coalesce(r.input_name, \'-\') END',
};

/** Spent by month (UTC), person (user@host of the closing run) or input: credits and, apart, keys retired as possibly charged; and what open purchases may yet cost. */
export function spend(store: Store, by: SpendBy): Spend {
  const rows = store.db
    .prepare(
      `SELECT s.name, ${GROUP[by]} AS g, coalesce(sum(p.credits), 0), sum(p.outcome = 'hit'), coalesce(sum(p.unconfirmed), 0)
         FROM purchases p JOIN services s ON s.id = p.service LEFT JOIN runs r ON r.id = p.run
        WHERE p.closed_at IS NOT NULL GROUP BY s.id, g ORDER BY s.id, g`,
    )
    .raw(true)
    .all() as [string, string | null, number, number, number][];
  const open = store.db
    .prepare(
      `SELECT s.name, sum(${AT_RISK}), coalesce(sum(p.unconfirmed), 0) FROM purchases p JOIN services s ON s.id = p.service
        WHERE p.outcome = 'open' GROUP BY s.id ORDER BY s.id`,
    )
    .raw(true)
    .all() as [string, number, number][];
  const companies = store.db
    .prepare(`SELECT s.name, count(DISTINCT p.domain) FROM purchases p JOIN services s ON s.id = p.service WHERE p.closed_at IS NOT NULL AND p.outcome = 'hit' GROUP BY s.id`)
    .raw(true)
    .all() as [string, number][];
  return {
    companies: companies.map(([service, n]) => ({ service, companies: num(n) })),
    rows: rows.map(([service, group, credits, bought, unconfirmed]): SpendRow => ({ service, group, credits: num(credits), bought: num(bought), unconfirmed: num(unconfirmed) })),
    open: open.map(([service, purchases, unconfirmed]): OpenSpend => ({ service, purchases: num(purchases), unconfirmed: num(unconfirmed) })).filter((o) => o.purchases > 0 || o.unconfirmed > 0),
  };
}

/** One person's store, as `enrich ledger` asks of it (store/ledger-types.ts). */
export class SqliteLedger implements LedgerStore {
  readonly sizeNote = '';
  readonly files: readonly string[];
  readonly now: () => number;

  constructor(readonly store: Store) {
    this.now = store.options.now;
    this.files = ['', '-wal', '-shm'].map((suffix) => `${store.path}${suffix}`);
  }

  /** Opens the file read-only unless the action writes; only an import or a copy's target may make it. */
  static open(path: string, how: LedgerOpen): SqliteLedger {
    const host = hostIdentity(how.env);
    return new SqliteLedger(Store.open(path, { tool: how.tool, ...(how.now === undefined ? {} : { now: how.now }), access: how.write ? 'write' : 'read', create: how.create, ...(host === undefined ? {} : { host }) }));
  }

  get shown(): string {
    return this.store.path;
  }

  async size(): Promise<number> {
    return this.store.sizeOnDisk();
  }

  async holdings(): Promise<ServiceHoldings[]> {
    return holdings(this.store);
  }

  async runs(limit: number): Promise<RunRow[]> {
    return runs(this.store, limit);
  }

  async *records(service: string | undefined): AsyncGenerator<HeldRecord> {
    yield* records(this.store, service);
  }

  async atRisk(domains: readonly string[]): Promise<AtRisk[]> {
    return atRisk(this.store, domains);
  }

  async release(purchases: readonly AtRisk[]): Promise<AtRisk[]> {
    return release(this.store, purchases);
  }

  async prune(cutoff: number, dryRun: boolean): Promise<Pruned> {
    return prune(this.store, cutoff, dryRun);
  }

  async spend(by: SpendBy): Promise<Spend> {
    return spend(this.store, by);
  }

  async budget(): Promise<BudgetView> {
    const now = this.now();
    const { since, until } = monthOf(now);
    const read = (text: string): unknown[][] => this.store.db.prepare(text).raw(true).all(since, until) as unknown[][];
    return budgetView(now, read(budgetLinesSql(() => '?')), read(serviceMonthSql(() => '?')));
  }

  async setBudget(person: string | null, credits: number | null, by: string): Promise<boolean> {
    if (credits === null) return this.store.db.prepare('DELETE FROM budgets WHERE person = ?').run(person ?? '').changes > 0;
    else {
      this.store.db
        .prepare('INSERT INTO budgets (person, credits, set_at, set_by) VALUES (?, ?, ?, ?) ON CONFLICT (person) DO UPDATE SET credits = excluded.credits, set_at = excluded.set_at, set_by = excluded.set_by')
        .run(person ?? '', credits, this.now(), by);
      return true;
    }
  }

  settleClocks(watch: Watch): Promise<void> {
    return watchSkewedRuns(this.store, watch.sleep, watch.note);
  }

  async copySource(): Promise<CopySource> {
    return new SqliteCopySource(this.store);
  }

  async copyTarget(dryRun: boolean): Promise<CopyTarget> {
    return new SqliteCopyTarget(this.store, dryRun);
  }

  async identity(): Promise<string> {
    return `sqlite ${fileIdentity(this.store.path)}`;
  }

  importedBytes(path: string): Promise<number | null> {
    return this.store.importedBytes(path);
  }

  importer(service: string): ReturnType<JournalTarget['importer']> {
    return this.store.importer(service);
  }

  markImported(path: string, bytes: number, companies: number): Promise<void> {
    return this.store.markImported(path, bytes, companies);
  }

  /** Damage SQLite found is said as such (move the store aside, restore a backup). */
  explain(error: unknown): unknown {
    return explainDamage(error, this.store.path, false);
  }

  async close(): Promise<void> {
    this.store.close();
  }
}
