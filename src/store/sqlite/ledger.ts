import { UsageError } from '../../errors.js';
import { fileIdentity } from '../../io/paths.js';
import type { CopySource, CopyTarget } from '../copy-types.js';
import type { AtRisk, HeldRecord, LedgerOpen, LedgerStore, Pruned, Watch } from '../ledger-types.js';
import { AT_RISK, heldOf, num, PRUNED, SqlLedger, sqliteText } from '../ledger-sql.js';
import { hostIdentity } from '../host.js';
import { LEASE_MS } from './connection.js';
import { SqliteCopyTarget } from './copy.js';
import { SqlCopySource } from '../copy.js';
import { explainDamage } from './errors.js';
import { Store } from './store.js';

export type { AtRisk, HeldRecord, Pruned, RunRow, ServiceHoldings } from '../ledger-types.js';

const all = (store: Store, text: string, ...params: unknown[]): unknown[][] => store.db.prepare(sqliteText(text)).raw(true).all(...params) as unknown[][];

/** Every record held, service by service, oldest first; a damaged row is passed over. */
export function* records(store: Store, service: string | undefined): Generator<HeldRecord> {
  const filter = service === undefined ? '' : 'WHERE s.name = ?';
  const statement = store.db
    .prepare(`SELECT s.name, c.bought_at, c.credits, c.generation, c.record FROM companies c JOIN services s ON s.id = c.service ${filter} ORDER BY s.id, c.bought_at, c.domain`)
    .raw(true);
  for (const row of (service === undefined ? statement.iterate() : statement.iterate(service)) as IterableIterator<unknown[]>) {
    const held = heldOf(...(row as [unknown, unknown, unknown, unknown, unknown]));
    if (held !== null) yield held;
  }
}

/** Purchases whose paid call may have been charged without an answer seen: a credit each at most. */
export function atRisk(store: Store, domains: readonly string[]): AtRisk[] {
  const rows = store.db
    .prepare(`SELECT s.name, p.domain, p.generation, p.key_version, p.error_code, p.lost_at, p.owner_run, p.uncertain, p.resumed FROM purchases p JOIN services s ON s.id = p.service WHERE ${AT_RISK} ORDER BY s.id, p.domain, p.generation`)
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
  const counts = (): Pruned => ({
    companies: num(all(store, `SELECT count(*) FROM ${PRUNED.companies}`, cutoff)[0]?.[0]),
    lookups: num(all(store, `SELECT count(*) FROM ${PRUNED.lookups}`, cutoff)[0]?.[0]),
    purchases: num(all(store, `SELECT count(*) FROM ${PRUNED.purchases}`, cutoff)[0]?.[0]),
  });
  if (dryRun) return counts();
  // One write transaction from the check to the new key epoch: a run registering meanwhile is refused here, or waits and reads the new epoch.
  return store.db.transaction(() => {
    // A run under way would buy under keys the prune may make repeat, or miss records it reuses.
    const live = (store.db.prepare("SELECT id FROM runs WHERE status = 'running'").raw(true).all() as [number][]).filter(([id]) => store.runAlive(id));
    if (live.length > 0) throw new UsageError(`a run is under way on this store (run ${live.map(([id]) => id).join(', ')}); prune when it has finished`);
    const result = counts();
    for (const where of Object.values(PRUNED)) store.db.prepare(sqliteText(`DELETE FROM ${where}`)).run(cutoff);
    if (result.purchases > 0) store.bumpKeyEpoch();
    return result;
  }).immediate();
}

/** One person's store, as `enrich ledger` asks of it (store/ledger-types.ts). */
export class SqliteLedger extends SqlLedger implements LedgerStore {
  readonly sizeNote = '';
  readonly files: readonly string[];
  readonly now: () => number;
  protected readonly journal: Store;
  protected readonly beating = 'NULL';
  protected readonly month = "strftime('%Y-%m', p.closed_at / 1000, 'unixepoch')";

  constructor(readonly store: Store) {
    super();
    this.now = store.options.now;
    this.journal = store;
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

  /** Read in one read transaction. */
  async copySource(): Promise<CopySource> {
    const db = this.store.db;
    db.exec('BEGIN');
    return new SqlCopySource(async (text, params) => db.prepare(sqliteText(text)).all(...params) as Record<string, unknown>[], 'BINARY', async () => void (db.inTransaction && db.exec('COMMIT')));
  }

  async copyTarget(dryRun: boolean): Promise<CopyTarget> {
    return new SqliteCopyTarget(this.store, dryRun);
  }

  async identity(): Promise<string> {
    return `sqlite ${fileIdentity(this.store.path)}`;
  }

  protected async rows(text: string, params: readonly unknown[] = []): Promise<unknown[][]> {
    return all(this.store, text, ...params);
  }

  /** Damage SQLite found is said as such (move the store aside, restore a backup). */
  explain(error: unknown): unknown {
    return explainDamage(error, this.store.path, false);
  }

  async close(): Promise<void> {
    this.store.close();
  }
}
