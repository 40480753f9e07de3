import { EnrichError, UsageError } from '../../errors.js';
import type { CopySource, CopyTarget } from '../copy-types.js';
import type { AtRisk, HeldRecord, LedgerOpen, LedgerStore, Pruned, RunRow } from '../ledger-types.js';
import { AT_RISK, heldOf, num, numOrNull, PRUNED, runOf, runsSql, SqlLedger } from '../ledger-sql.js';
import { hostIdentity } from '../host.js';
import { displayStore } from '../path.js';
import { client, connect, CONFLICT_RETRIES, describe, inTransaction, isLockTimeout, isRetryableConflict, keepsSessionSurely, lockWait, placeOf, type Place, type Session } from './connect.js';
import { BUDGETS_LOCK, RUN_ALIVE } from './writer.js';
import type { BudgetView } from '../budget.js';
import { PgCopyTarget } from './copy.js';
import { SqlCopySource } from '../copy.js';
import { MAINTENANCE_LOCK, NOW_MS } from './schema.js';
import { MAINTENANCE_WAIT_MS, maintenanceHeld, PgStore, TABLE_WAIT_MS } from './store.js';
import { HASHED, LEASE_MS, OUTCOME_CHANNEL } from './writer.js';


/** Rows per page of an export. */
const PAGE = 1_000;

/** What held maintenance up once it had the maintenance lock, for messages. */
const rowsHeld = (waitedMs: number): string => `another session has held a table or rows it needs for ${waitedMs / 1000} s (an open transaction)`;

/** A run that may still be sending under its claims, by the server's clock (never a host's): `r` is the run. */
const ALIVE = (r: string, dead: string): string => RUN_ALIVE(r, dead, String(LEASE_MS));

/**
 * The team store as `enrich ledger` asks of it, with the same figures as one person's. Runs are judged alive by the server's clock
 * (and, on this host, by their process); prune holds the maintenance lock, so two machines never prune or migrate at once.
 */
export class PgLedger extends SqlLedger implements LedgerStore {
  readonly shown: string;
  readonly sizeNote: string;
  readonly files: readonly string[] = [];
  readonly now: () => number;
  private readonly db: Session;
  protected readonly journal: PgStore;
  /** A run under way, told from one that ended unrecorded as RUN_ALIVE tells them ($2: this host's dead runs, given by runs). */
  protected readonly beating = ALIVE('r', '$2');
  protected readonly month = `to_char(to_timestamp(p.closed_at / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM')`;

  private constructor(readonly store: PgStore) {
    super();
    this.now = store.now;
    this.journal = store;
    this.db = store.db;
    this.shown = displayStore(store.url);
    this.sizeNote = `in database ${store.db.place.database}`;
  }

  /** Opens the team store; a database without enrich tables is made a store only for an import or a copy. `queryTimeoutMs` (tests) shortens every lock wait too. */
  static async open(url: string, how: LedgerOpen & { queryTimeoutMs?: number }): Promise<PgLedger> {
    if (!how.create) await refuseMissing(url);
    const host = hostIdentity(how.env);
    const timeout = how.queryTimeoutMs === undefined ? {} : { queryTimeoutMs: how.queryTimeoutMs };
    return new PgLedger(await PgStore.open(url, { tool: how.tool, ...(how.now === undefined ? {} : { now: how.now }), access: how.write ? 'write' : 'read', ...timeout, ...(host === undefined ? {} : { host }) }));
  }

  async size(): Promise<number> {
    const { rows } = await this.db.query<{ bytes: number }>('SELECT pg_database_size(current_database()) AS bytes');
    return num(rows[0]?.bytes);
  }

  /** Alive as every judgement of the team store's says (RUN_ALIVE, with this host's dead runs). */
  override async runs(limit: number): Promise<RunRow[]> {
    return (await this.rows(runsSql(this.beating), [limit, await this.store.deadHere()])).map(runOf);
  }

  /** Page by page in the order the SQLite store gives (bytes, not the server's collation). */
  async *records(service: string | undefined): AsyncGenerator<HeldRecord> {
    let after: [number, number, string] = [0, 0, ''];
    for (;;) {
      const { rows } = await this.db.query<{ sid: number; name: string; bought_at: number; credits: number; generation: number; record: string; domain: string }>(
        `SELECT s.id AS sid, s.name, c.bought_at, c.credits, c.generation, c.record, c.domain FROM companies c JOIN services s ON s.id = c.service
          WHERE ($1::text IS NULL OR s.name = $1) AND (c.service, c.bought_at, c.domain COLLATE "C") > ($2::bigint, $3::bigint, $4::text COLLATE "C")
          ORDER BY c.service, c.bought_at, c.domain COLLATE "C" LIMIT ${PAGE}`,
        [service ?? null, ...after],
      );
      for (const r of rows) {
        const held = heldOf(r.name, r.bought_at, r.credits, r.generation, r.record);
        if (held !== null) yield held;
      }
      const last = rows[rows.length - 1];
      if (last === undefined || rows.length < PAGE) return;
      after = [num(last.sid), num(last.bought_at), last.domain];
    }
  }

  async atRisk(domains: readonly string[]): Promise<AtRisk[]> {
    const dead = await this.store.deadHere();
    const { rows } = await this.db.query<Record<string, unknown>>(
      `SELECT s.name, p.domain, p.generation, p.key_version, p.error_code, p.lost_at, p.uncertain, p.resumed FROM purchases p JOIN services s ON s.id = p.service
        LEFT JOIN runs o ON o.id = p.owner_run
        WHERE ${AT_RISK} AND (p.owner_run IS NULL OR o.id IS NULL OR NOT ${ALIVE('o', '$1')}) AND (cardinality($2::text[]) = 0 OR p.domain = any($2::text[]))
        ORDER BY s.id, p.domain COLLATE "C", p.generation`,
      [dead, [...domains]],
    );
    return rows.map((r) => ({
      service: String(r['name']),
      domain: String(r['domain']),
      generation: num(r['generation']),
      keyVersion: num(r['key_version']),
      errorCode: (r['error_code'] as string | null) ?? null,
      lostAt: numOrNull(r['lost_at']),
      tried: num(r['uncertain']) === 1 && num(r['resumed']) === 1,
    }));
  }

  /** Each purchase under the company locks a run's writes take, and only while still open under the listed key with no live holder (another machine may have claimed it since). */
  async release(purchases: readonly AtRisk[]): Promise<AtRisk[]> {
    if (purchases.length === 0) return [];
    const dead = await this.store.deadHere();
    return this.transaction(async () => {
      const released: AtRisk[] = [];
      for (const [service, list] of groupBy(purchases, (p) => p.service)) {
        const serviceId = await this.store.serviceId(service);
        await this.lockCompanies(serviceId, list.map((p) => p.domain));
        await this.db.query(HASHED); // writer.ts: never the array read again for each purchase
        const { rows } = await this.db.query<{ domain: string; generation: number }>(
          `WITH freed AS (
             UPDATE purchases p SET key_version = p.key_version + 1, intent_key = NULL, uncertain = 0, lost_at = NULL, settle_ms = NULL, resumed = 0, owner_run = NULL, unconfirmed = p.unconfirmed + 1
               FROM unnest($2::text[], $3::int[], $4::int[]) AS u(domain, generation, v)
              WHERE p.service = $1 AND p.domain = u.domain AND p.generation = u.generation AND p.domain = ANY($2::text[]) AND p.key_version = u.v AND ${AT_RISK}
                AND (p.owner_run IS NULL OR NOT EXISTS (SELECT 1 FROM runs o WHERE o.id = p.owner_run AND ${ALIVE('o', '$5')}))
             RETURNING p.service, p.domain, p.generation)
           SELECT domain, generation, pg_notify($6, service::text || ':' || domain) FROM freed`,
          [serviceId, list.map((p) => p.domain), list.map((p) => p.generation), list.map((p) => p.keyVersion), dead, OUTCOME_CHANNEL],
        );
        const freed = new Set(rows.map((r) => `${r.domain} ${num(r.generation)}`));
        released.push(...list.filter((p) => freed.has(`${p.domain} ${p.generation}`)));
      }
      return released;
    });
  }

  async prune(cutoff: number, dryRun: boolean): Promise<Pruned> {
    const count = async (where: string): Promise<number> => num((await this.rows(`SELECT count(*) AS n FROM ${where}`, [cutoff]))[0]?.[0]);
    const counts = async (): Promise<Pruned> => ({ companies: await count(PRUNED.companies), lookups: await count(PRUNED.lookups), purchases: await count(PRUNED.purchases) });
    if (dryRun) return counts();
    const dead = await this.store.deadHere();
    const waitMs = lockWait(MAINTENANCE_WAIT_MS, this.store.queryTimeoutMs);
    const tableMs = lockWait(TABLE_WAIT_MS, this.store.queryTimeoutMs);
    let locked = false;
    const holder = (): string => (locked ? rowsHeld(tableMs) : maintenanceHeld(waitMs));
    const work = async (): Promise<Pruned> => {
      // One maintainer at a time (a migration takes the same lock), and no run registers meanwhile.
      await this.db.query('SELECT pg_advisory_xact_lock($1)', [MAINTENANCE_LOCK]);
      // And the budgets' lock alone: no claim that read the key epoch before it moves commits after (writer.ts EPOCH_STILL).
      await this.db.query('SELECT pg_advisory_xact_lock($1)', [BUDGETS_LOCK]);
      locked = true;
      // Queued for runs, the lock below holds up every run's heartbeat and start: not for long.
      await this.db.query(`SET LOCAL lock_timeout = ${tableMs}`);
      const refuseLive = async (): Promise<void> => {
        const { rows: live } = await this.db.query<{ id: number }>(`SELECT r.id FROM runs r WHERE ${ALIVE('r', '$1')} ORDER BY r.id`, [dead]);
        if (live.length > 0) throw new UsageError(`a run is under way on this store (run ${live.map((r) => r.id).join(', ')}); prune when it has finished`);
      };
      // A run under way is said before the lock is waited for, and checked again under it.
      await refuseLive();
      await this.db.query('LOCK TABLE runs IN SHARE MODE');
      await refuseLive();
      const result = await counts();
      for (const where of Object.values(PRUNED)) await this.db.query(`DELETE FROM ${where}`, [cutoff]);
      // Generations forgotten: keys derived from now on must never repeat one sent before (store.ts storeIdOf).
      if (result.purchases > 0) {
        await this.db.query(`INSERT INTO meta (key, value) VALUES ('key_epoch', '1') ON CONFLICT (key) DO UPDATE SET value = ((meta.value)::int + 1)::text`);
      }
      return result;
    };
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.bounded('prune the team store', 'nothing was removed', holder, waitMs, work);
      } catch (error) {
        // A run's batch holding a row this deletes, waiting for the budgets' lock this holds: the server ends one of them, and it goes again.
        if (!isRetryableConflict(error) || attempt >= CONFLICT_RETRIES) throw error;
      }
    }
  }

  override async budget(): Promise<BudgetView> {
    try {
      return await super.budget();
    } catch (error) {
      if ((error as { code?: string }).code === '42501') {
        throw new UsageError(`the role this store is opened as may not read this team store's budgets (PostgreSQL: ${(error as Error).message}); its owner can GRANT SELECT ON budgets to it (docs/budgets.md)`, { cause: error });
      }
      throw error;
    }
  }

  async setBudget(person: string | null, credits: number | null, by: string): Promise<boolean> {
    try {
      if (credits === null) return ((await this.db.query('DELETE FROM budgets WHERE person = $1', [person ?? ''])).rowCount ?? 0) > 0;
      else {
        // Under the budgets' lock (writer.ts BUDGET_LOCKS): no claim is in flight while the cap changes, and every claim after it reads the new one.
        await this.db.query(
          `WITH l AS (SELECT pg_advisory_xact_lock(${BUDGETS_LOCK}))
           INSERT INTO budgets (person, credits, set_at, set_by) SELECT $1, $2, ${NOW_MS}, $3 FROM l
           ON CONFLICT (person) DO UPDATE SET credits = excluded.credits, set_at = excluded.set_at, set_by = excluded.set_by`,
          [person ?? '', credits, by],
        );
        return true;
      }
    } catch (error) {
      if ((error as { code?: string }).code === '42501') {
        throw new UsageError(`the role this store is opened as may not change this team store's budgets (PostgreSQL: ${(error as Error).message}); ask whoever administers it (docs/budgets.md)`, { cause: error });
      }
      throw error;
    }
  }

  /** Nothing to wait for: leases are judged by the server's clock, which every machine shares. */
  async settleClocks(): Promise<void> {}

  /** Read in one REPEATABLE READ transaction, in byte order. */
  async copySource(): Promise<CopySource> {
    await this.db.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
    return new SqlCopySource(async (text, params) => (await this.db.query(text, params)).rows, '"C"', async () => void (await this.db.query('COMMIT')));
  }

  /** A copy into the team store holds the maintenance lock throughout: no prune runs beside it. A dry run writes nothing, and holds nothing. */
  async copyTarget(dryRun: boolean): Promise<CopyTarget> {
    if (!dryRun) {
      // The lock lives on a session, which a pooler in transaction mode hands to others between transactions.
      const { host, port, database } = this.db.place;
      const kept = await keepsSessionSurely(this.db, this.store.url).catch((error: unknown) => {
        throw new EnrichError(`a copy into the team store holds its maintenance lock throughout, and whether ${host}:${port} keeps a session could not be told (a second connection: ${describe(error)}); nothing was copied`, 'unavailable', { cause: error });
      });
      if (!kept) {
        throw new UsageError(
          `a copy into the team store holds its maintenance lock throughout, and ${host}:${port} pools in transaction mode (a session is not kept); give the address of ${database} that keeps one (direct, or a pooler in session mode); nothing was copied`,
        );
      }
      const waitMs = lockWait(MAINTENANCE_WAIT_MS, this.store.queryTimeoutMs);
      try {
        await this.db.lock(MAINTENANCE_LOCK, waitMs);
      } catch (error) {
        if (isLockTimeout(error)) throw this.held('copy into the team store', 'nothing was copied', maintenanceHeld(waitMs), error);
        throw error;
      }
    }
    // Each chunk waits for rows a run's batch (or anyone) holds as long as a prune would.
    const tableMs = lockWait(TABLE_WAIT_MS, this.store.queryTimeoutMs);
    const chunk = <T>(work: () => Promise<T>): Promise<T> => this.bounded('copy into the team store', 'what was copied before that is kept', () => rowsHeld(tableMs), tableMs, work);
    return new PgCopyTarget(this.store, dryRun, {
      deadHere: () => this.store.deadHere(),
      lockCompanies: (serviceId, domains) => this.lockCompanies(serviceId, domains),
      transaction: (work) => (dryRun ? work() : chunk(work)),
      end: async () => void (dryRun ? undefined : await this.db.unlock(MAINTENANCE_LOCK)),
    });
  }

  /** The database itself: its name, its server's start, and the store's id. */
  async identity(): Promise<string> {
    const { rows } = await this.db.query<{ id: string }>(
      `SELECT current_database() || ' ' || pg_postmaster_start_time()::text || ' ' || coalesce((SELECT value FROM meta WHERE key = 'store_id'), '') AS id`,
    );
    return `postgres ${rows[0]?.id ?? ''}`;
  }

  explain(error: unknown): unknown {
    return error;
  }

  close(): Promise<void> {
    return this.store.close();
  }

  protected async rows(text: string, values?: readonly unknown[]): Promise<unknown[][]> {
    return (await this.db.query(text, values === undefined ? undefined : [...values])).rows.map((r) => Object.values(r));
  }

  /** The per-company locks every claim and outcome of a run takes (writer.ts), in one order. */
  private async lockCompanies(serviceId: number, domains: readonly string[]): Promise<void> {
    await this.db.query(`SELECT count(pg_advisory_xact_lock(hashtextextended($1::text || ':' || d, 0))) FROM unnest($2::text[]) AS d`, [serviceId, [...new Set(domains)].sort()]);
  }

  private transaction<T>(work: () => Promise<T>): Promise<T> {
    return inTransaction(this.db, work);
  }

  /**
   * `work` in one transaction, no lock waited for longer than `waitMs`: a lock held longer is one line (exit 6) naming `holder`,
   * rather than a query timeout taken for a lost connection (with the server still waiting, holding what it holds).
   */
  private async bounded<T>(doing: string, left: string, holder: () => string, waitMs: number, work: () => Promise<T>): Promise<T> {
    try {
      return await inTransaction(this.db, work, waitMs);
    } catch (error) {
      if (isLockTimeout(error)) throw this.held(doing, left, holder(), error);
      throw error;
    }
  }

  /** Maintenance given up on a lock held elsewhere: what it was doing, what holds it, and what is left as it was. */
  private held(doing: string, left: string, holder: string, cause: unknown): EnrichError {
    const { host, port, database } = this.db.place;
    return new EnrichError(`cannot ${doing} in ${database} on ${host}:${port}: ${holder}; ${left}; run the same command once it is done`, 'unavailable', { cause });
  }
}

function groupBy<T>(list: readonly T[], key: (t: T) => string): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const item of list) groups.set(key(item), [...(groups.get(key(item)) ?? []), item]);
  return groups;
}

/** Whether the database at `url` holds an enrich store (its tables), asked on a connection of its own without changing it. */
export async function storeThere(url: string): Promise<boolean> {
  return (await probe(url)).there;
}

async function probe(url: string): Promise<{ there: boolean; place: Place }> {
  const c = await connect(client(url));
  try {
    const { rows } = await c.query<{ t: string | null }>(`SELECT to_regclass('meta')::text AS t`);
    return { there: rows[0]?.t != null, place: placeOf(c) };
  } finally {
    await c.end().catch(() => {});
  }
}

/** A database with no enrich tables is no store: reading or tidying must not make one (a mistyped address would read as an empty store). */
async function refuseMissing(url: string): Promise<void> {
  const { there, place } = await probe(url);
  if (there) return;
  throw new UsageError(`no store in database ${place.database} at ${place.host}:${place.port}: a batch run creates it with its first purchase or lookup; give --store (or ENRICH_STORE) the address of another`);
}
