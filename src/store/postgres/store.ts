import { hostname } from 'node:os';
import type pg from 'pg';
import { EnrichError, UsageError } from '../../errors.js';
import { loginName } from '../budget.js';
import { bootId } from '../host.js';
import type { JournalEvents } from '../import-journal.js';
import type { RunInfo } from '../types.js';
import { client, connect, describe, inTransaction, isConnectionLoss, isLockTimeout, lockWait, placeOf, probeChannel, QUERY_TIMEOUT_MS, RECONNECT_MS, Session } from './connect.js';
import { cannotWrite, firstMissing, glance, grantsFor, readStoreId, schemaVersion } from './inspect.js';
import { PgRecords } from './records.js';
import { ServerClock } from './server-clock.js';
import { MAINTENANCE_LOCK, MIGRATIONS, NOW_MS, SCHEMA_VERSION } from './schema.js';
import { LEASE_MS, RUN_ALIVE } from './writer.js';
import { isProcessAlive } from '../../process-alive.js';
import { policyNowAfter, sameJob } from '../run-records.js';

export interface PgStoreOptions {
  tool: string;
  /** The store's clock, for tests; by default the server's, read once at open (see PgStore.now). */
  now?: () => number;
  /** Who this machine is in `runs` (a test plays several machines from one). */
  host?: string;
  /** This boot of it (host.ts bootId; a test plays another). */
  boot?: string | null;
  user?: string;
  /** How long a lost connection is tried again before the run stops (connect.ts RECONNECT_MS). */
  reconnectMs?: number;
  /** A statement unanswered this long is taken for a lost connection (connect.ts QUERY_TIMEOUT_MS). */
  queryTimeoutMs?: number;
  /** `read`: only reads (enrich ledger show, runs, export): a role that may not write is let in. */
  access?: 'read' | 'write';
}

/**
 * The team store: one PostgreSQL database for every machine of a team. Its id, the base of every Idempotency-Key, is the database's
 * meta row, so every machine derives the same key for a purchase and the service replays instead of charging twice.
 */
export class PgStore {
  readonly host: string;
  /** The boot of this host: another's process ids are never judged here (null: none are). */
  readonly boot: string | null;
  readonly user: string;
  /** The store's clock: the server's, so machines whose clocks disagree agree on every age; a host's own clock is for display only. */
  readonly now: () => number;
  /** This host's own clock, for what it measures against itself (the lease's lapse). */
  readonly hostNow: () => number;
  private readonly services = new Map<string, number>();
  private readonly opened: PgRecords[] = [];

  private constructor(
    readonly url: string,
    /** Reads, runs and heartbeats (connecting again when lost); each run writes on a connection of its own. */
    readonly db: Session,
    /** What every key derives from: the store's id, and the key epoch a prune bumps (read again as each run starts). */
    public storeId: string,
    readonly options: PgStoreOptions,
    /** The server's clock as read at open (sessionAndClock), and by every heartbeat since. */
    readonly clock: ServerClock,
    /** Whether a connection keeps its session between transactions (sessionAndClock). */
    readonly keepsSession: boolean,
  ) {
    this.host = options.host ?? hostname();
    this.boot = options.boot === undefined ? bootId() : options.boot;
    this.user = options.user ?? loginName();
    this.now = options.now ?? (() => clock.now());
    this.hostNow = options.now ?? (() => Date.now());
  }

  static async open(url: string, options: PgStoreOptions): Promise<PgStore> {
    const db = await connect(client(url, false, options.queryTimeoutMs));
    try {
      const rights = options.access !== 'read';
      // Rights asked before the run begins: a role that may only read would otherwise fail at its first write.
      let seen = await glance(db, rights);
      // A replica, or a database set to read-only, is refused before anything is tried on it.
      if (rights && seen?.readOnly === true) throw readOnlyStore(db);
      if (seen?.version !== SCHEMA_VERSION) {
        await migrate(db, options.queryTimeoutMs ?? QUERY_TIMEOUT_MS, seen?.version ?? 0);
        // The tables made or altered: their rights, and the store id, asked again.
        seen = await glance(db, rights);
      }
      const missing = seen?.missing ?? [];
      if (missing.length > 0) throw new UsageError(`${cannotWrite(placeOf(db), db.user ?? '', firstMissing(missing))}; ${NOTHING_SENT}`);
      const clock = new ServerClock();
      const kept = await sessionAndClock(db, clock);
      return new PgStore(url, new Session(url, db, options.reconnectMs, options.queryTimeoutMs), knownStoreId(seen?.storeId ?? null), options, clock, kept);
    } catch (error) {
      await db.end().catch(() => {});
      if (error instanceof EnrichError) throw error;
      // read_only_sql_transaction: an empty read-only database, found by its first CREATE.
      if ((error as { code?: unknown }).code === '25006') throw readOnlyStore(db);
      if (deniedTo(error)) throw new UsageError(`${cannotWrite(placeOf(db), db.user ?? '', describe(error))}; ${NOTHING_SENT}`, { cause: error });
      const { host, port } = placeOf(db);
      // Lost as it was being opened (a server restarting): out of reach for now, not a failure (exit 6).
      if (isConnectionLoss(error)) throw new EnrichError(`lost the team store at ${host}:${port} as it was being opened (${describe(error)}); ${NOTHING_SENT}, run the same command once it is back`, 'unavailable', { cause: error });
      throw new EnrichError(`cannot use the team store at ${host}:${port}: ${describe(error)}`, 'failure', { cause: error });
    }
  }

  async serviceId(name: string): Promise<number> {
    let id = this.services.get(name);
    if (id === undefined) {
      // One round trip: the row made, or the one there. A row another machine makes at the same
      // moment is committed after this statement's snapshot, so neither finds it: asked again.
      const { rows } = await this.db.query<{ id: number }>(
        `WITH made AS (INSERT INTO services (name) VALUES ($1) ON CONFLICT (name) DO NOTHING RETURNING id)
         SELECT id FROM made UNION ALL SELECT id FROM services WHERE name = $1`,
        [name],
      );
      id = Number((rows[0] ?? (await this.db.query<{ id: number }>('SELECT id FROM services WHERE name = $1', [name])).rows[0])?.id);
      this.services.set(name, id);
    }
    return id;
  }

  /** Opens a run against one service: its records, and a row in `runs` saying who runs it, and that it is under way. */
  async beginRun(service: string, info: RunInfo): Promise<PgRecords> {
    // The run's writing connection is made while the run registers.
    const writer = PgRecords.connectWriter(this);
    try {
      const serviceId = await this.serviceId(service);
      const now = this.now();
      const policyNow = await this.policyNow(serviceId, info, now);
      const { rows } = await this.db.query<{ id: number }>(
        `INSERT INTO runs (service, started_at, heartbeat_at, policy_now, pid, host, boot, "user", tool, input_name, input_sha256, rows, dry_run, options, status)
         VALUES ($1, $2, ${NOW_MS}, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, 'running') RETURNING id`,
        [serviceId, now, policyNow, process.pid, this.host, this.boot, this.user, this.options.tool, info.inputName, info.inputSha256, info.rows, info.dryRun ? 1 : 0, JSON.stringify(info.options)],
      );
      // Read once the run is registered: a prune holds runs locked (SHARE) until it commits its new
      // key epoch, so this sees that epoch, or the prune saw this run alive and was refused.
      this.storeId = await storeIdOf(this.db);
      const records = await PgRecords.open(this, service, serviceId, Number(rows[0]?.id), policyNow, writer);
      this.opened.push(records);
      return records;
    } catch (error) {
      void writer.then((c) => c.end()).catch(() => {});
      throw error;
    }
  }

  /** Records of one service without a run (the ledger, imports, copies). */
  async records(service: string): Promise<PgRecords> {
    const records = await PgRecords.open(this, service, await this.serviceId(service), null, this.now());
    this.opened.push(records);
    return records;
  }

  // ---- an 0.1 journal's import: paths are kept with the host, since a journal is one machine's file ----

  async importedBytes(path: string): Promise<number | null> {
    const { rows } = await this.db.query<{ bytes: number }>('SELECT bytes FROM imports WHERE path = $1', [`${this.host}:${path}`]);
    return rows[0] === undefined ? null : Number(rows[0].bytes);
  }

  async importer(service: string): Promise<{ importEvents(events: JournalEvents): Promise<void>; loadCompanies: PgRecords['loadCompanies'] }> {
    const records = await this.records(service);
    return { importEvents: (events) => records.importEvents(events), loadCompanies: (companies, visit) => records.loadCompanies(companies, visit) };
  }

  async markImported(path: string, bytes: number, companies: number): Promise<void> {
    await this.db.query(
      'INSERT INTO imports (path, bytes, imported_at, companies) VALUES ($1, $2, $3, $4) ON CONFLICT (path) DO UPDATE SET bytes = excluded.bytes, imported_at = excluded.imported_at, companies = excluded.companies',
      [`${this.host}:${path}`, bytes, Date.now(), companies],
    );
  }

  /** When freshness is judged (run-records.ts policyNowAfter); a run is alive as RUN_ALIVE says. */
  private async policyNow(serviceId: number, info: RunInfo, now: number): Promise<number> {
    const maxAge = info.options['max_age_ms'] ?? null;
    if (maxAge === null) return now;
    const { rows } = await this.db.query<{ id: number; status: string; policy_now: number | null; max_age: string | null }>(
      `SELECT id, status, policy_now, (options::json ->> 'max_age_ms') AS max_age FROM runs
        WHERE service = $1 AND input_sha256 = $2 AND dry_run = 0 ORDER BY id DESC LIMIT 1`,
      [serviceId, info.inputSha256],
    );
    const row = rows[0];
    if (row === undefined) return now;
    const last = { status: row.status, policyNow: row.policy_now, maxAge: row.max_age === null ? null : Number(row.max_age) };
    // Whether it is alive is asked only where the answer counts.
    let alive = false;
    if (last.status === 'running' && sameJob(last, Number(maxAge), now)) {
      const { rows: beating } = await this.db.query(`SELECT 1 FROM runs r WHERE r.id = $1 AND ${RUN_ALIVE('r', '$2', String(LEASE_MS))}`, [row.id, await this.deadHere()]);
      alive = beating.length > 0;
    }
    return policyNowAfter({ ...last, alive: () => alive }, Number(maxAge), now);
  }

  /** Runs of this host marked running whose process is gone; a pid that may be reused is left to its lease (records.ts goneHere). */
  async deadHere(): Promise<number[]> {
    if (this.boot === null) return [];
    const { rows } = await this.db.query<{ id: number; pid: number }>("SELECT id, pid FROM runs WHERE status = 'running' AND host = $1 AND boot = $2", [this.host, this.boot]);
    return rows.filter((r) => !isProcessAlive(r.pid)).map((r) => Number(r.id));
  }

  async close(): Promise<void> {
    for (const r of this.opened.splice(0)) await r.disconnect();
    await this.db.end();
  }

  get reconnectMs(): number {
    return this.options.reconnectMs ?? RECONNECT_MS;
  }

  get queryTimeoutMs(): number {
    return this.options.queryTimeoutMs ?? QUERY_TIMEOUT_MS;
  }
}

const NOTHING_SENT = 'nothing was sent to the service';

function readOnlyStore(db: pg.Client): UsageError {
  const { host, port, database } = placeOf(db);
  return new UsageError(`the team store ${database} on ${host}:${port} is read-only (a replica, or default_transaction_read_only = on); give the primary's address; ${NOTHING_SENT}`);
}

/**
 * Whether this connection keeps its session across transactions (LISTEN in one, look in the next), and the server's clock. An idle
 * transaction-mode pooler may look like a kept session, so nothing that must hold rests on the answer.
 */
async function sessionAndClock(db: pg.Client, clock: ServerClock): Promise<boolean> {
  const channel = probeChannel();
  try {
    await db.query(`BEGIN; LISTEN ${channel}; COMMIT`);
  } catch {
    await db.query('ROLLBACK').catch(() => {});
  }
  const sent = Date.now();
  const { rows } = await db.query<{ kept: boolean; now: number }>(`SELECT $1::text IN (SELECT pg_listening_channels()) AS kept, ${NOW_MS} AS now`, [channel]);
  clock.observe(Number(rows[0]?.now), sent, Date.now());
  // A second reading, the first often paying for a connection's warm-up; heartbeats add more.
  const again = Date.now();
  const answers = (await db.query(`UNLISTEN ${channel}; SELECT ${NOW_MS} AS now`)) as unknown as pg.QueryResult<{ now: number }>[];
  clock.observe(Number(answers[1]?.rows[0]?.now), again, Date.now());
  return rows[0]?.kept === true;
}

/** The server's "permission denied" (insufficient_privilege), or "must be owner". */
const deniedTo = (error: unknown): boolean => (error as { code?: string }).code === '42501';

/** How long maintenance waits for a table or rows another session holds: every run's statements on that table queue behind it (a held-up heartbeat loses its lease). */
export const TABLE_WAIT_MS = 5_000;
/** How long an upgrade, a `ledger prune` or a `ledger copy` waits for the maintenance lock that another of them holds (lockWait). */
export const MAINTENANCE_WAIT_MS = 30_000;

/** What held a wait for the maintenance lock up, for messages. */
export const maintenanceHeld = (waitedMs: number): string =>
  `another enrich has held the store's maintenance lock for ${waitedMs / 1000} s (an upgrade, a \`ledger copy\` or \`ledger prune\`)`;

/** What held a wait for a table up, for messages. */
const tableHeld = (waitedMs: number): string => `another session has held one of its tables for ${waitedMs / 1000} s (an open transaction, a dump)`;

/**
 * Brings the schema up to date in one transaction under the maintenance lock (transaction-scoped, so a pooler cannot strand it); a
 * newer store is refused untouched. Lock waits stay under the query timeout, so a held lock is exit 6, not a server taken for dead.
 */
async function migrate(db: pg.Client, timeoutMs: number, seen: number): Promise<void> {
  const refuseNewer = (v: number): void => {
    const { host, database } = placeOf(db);
    if (v > SCHEMA_VERSION) throw new UsageError(`the team store ${database} on ${host} was written by a newer enrich (schema ${v}); upgrade enrich to use it; ${NOTHING_SENT}`);
  };
  refuseNewer(seen);
  if (seen === SCHEMA_VERSION) return;
  // Another machine's migration holds it for a second; a `ledger copy` or `ledger prune` for as long as it runs.
  const maintenanceMs = lockWait(MAINTENANCE_WAIT_MS, timeoutMs);
  // An ALTER TABLE waits for every session using the table, and every later statement queues behind it: unbounded, one
  // machine's upgrade would hold the whole team's runs.
  const tableMs = lockWait(TABLE_WAIT_MS, timeoutMs);
  for (let attempt = 1; ; attempt++) {
    let locked = false;
    let from = seen;
    try {
      await inTransaction(
        db,
        async () => {
          await db.query('SELECT pg_advisory_xact_lock($1)', [MAINTENANCE_LOCK]);
          locked = true;
          await db.query(`SET LOCAL lock_timeout = ${tableMs}`);
          // Another machine may have migrated while this one waited for the lock.
          from = await schemaVersion(db);
          refuseNewer(from);
          for (let v = from + 1; v <= SCHEMA_VERSION; v++) await db.query(MIGRATIONS[v - 1] as string);
          await db.query(`INSERT INTO meta (key, value) VALUES ('schema_version', $1) ON CONFLICT (key) DO UPDATE SET value = excluded.value`, [String(SCHEMA_VERSION)]);
          if (from === 0) {
            // The store's identity, which every Idempotency-Key derives from: made once, with the schema.
            const id = Buffer.from(globalThis.crypto.getRandomValues(new Uint8Array(8))).toString('hex');
            await db.query(`INSERT INTO meta (key, value) VALUES ('store_id', $1), ('created_at', ${NOW_MS}::text) ON CONFLICT (key) DO NOTHING`, [id]);
          }
        },
        maintenanceMs,
      );
      return;
    } catch (error) {
      const code = (error as { code?: unknown }).code;
      // Chosen as a deadlock's victim (a running batch held a table this upgrade alters): again.
      if (code === '40P01' && attempt < 3) continue;
      if (deniedTo(error)) throw cannotMigrate(db, from, error);
      if (isLockTimeout(error)) throw lockBusy(db, from, locked ? tableHeld(tableMs) : maintenanceHeld(maintenanceMs), error);
      throw error;
    }
  }
}

/** A migration that waited out its lock timeout (exit 6), the store left at `from`; `held`: what held it. */
function lockBusy(db: pg.Client, from: number, held: string, error: unknown): EnrichError {
  const { host, port, database } = placeOf(db);
  const left = from === 0 ? 'nothing was made' : 'the schema is as it was';
  return new EnrichError(`cannot ${migrating(from)} in ${database} on ${host}:${port}: ${held}, and ${left}; run the same command once it is done; ${NOTHING_SENT}`, 'unavailable', { cause: error });
}

/** What a migration from version `from` does, for messages. */
function migrating(from: number): string {
  return from === 0 ? 'create the schema of the team store' : `upgrade the team store's schema (version ${from} to ${SCHEMA_VERSION})`;
}

/** A migration this role may not run: making the schema, or altering tables it does not own. */
function cannotMigrate(db: pg.Client, from: number, error: unknown): UsageError {
  const { host, port, database } = placeOf(db);
  const role = db.user ?? '';
  return new UsageError(
    `the role ${role} cannot ${migrating(from)} in ${database} on ${host}:${port} (${describe(error)}); run enrich once as the database's owner, who may then let ${role} in: ${grantsFor(role)}; ${NOTHING_SENT}`,
    { cause: error },
  );
}

/** The store's identity, with the key epoch a prune bumps (as the SQLite store's). */
async function storeIdOf(db: Pick<pg.Client, 'query'> | Session): Promise<string> {
  return knownStoreId(await readStoreId(db));
}

function knownStoreId(id: string | null): string {
  if (id === null) throw new UsageError(`the team store has no store id in its meta table: it is not an enrich store, or was edited by hand`);
  return id;
}
