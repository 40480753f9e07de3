import { statSync } from 'node:fs';
import type { JournalEvents } from '../import-journal.js';
import { hostname } from 'node:os';
import { loginName } from '../budget.js';
import { dirname } from 'node:path';
import { goneOnThisHost } from '../../process-alive.js';
import { monotonicMs } from '../../pipeline/clock.js';
import { EnrichError, errorMessage, UsageError } from '../../errors.js';
import { expectedColumns, LATE_INDEXES, SCHEMA, SCHEMA_VERSION } from './schema.js';
import { LEASE_MS, StoreWriteError, type Connection, type Db, type Statement } from './connection.js';
import { connectStore, createStoreFile, type StoreAccess } from './file.js';
import { ServiceRecords } from './records.js';
import { describeSqliteError, isDamage, sqliteCode, StoreDamagedError } from './errors.js';
import type { RunInfo } from '../types.js';
import type { WriterChoice } from './write-channel.js';
import { makeDirs, statOrNull } from '../../io/paths.js';
import { policyNowAfter } from '../run-records.js';

export { describeSqliteError } from './errors.js';
export { LEASE_MS, StoreWriteError, type Db, type Statement } from './connection.js';

/** How long a statement waits for another process's transaction on the store. */
const BUSY_TIMEOUT_MS = 15_000;

/** `journal_mode = WAL`, retried while SQLITE_BUSY: two runs creating a store at once both switch it, and SQLite refuses the loser without waiting. */
export function enableWal(db: Pick<Db, 'pragma'>): void {
  const deadline = monotonicMs() + BUSY_TIMEOUT_MS;
  const pause = new Int32Array(new SharedArrayBuffer(4));
  for (let attempt = 0; ; attempt++) {
    try {
      db.pragma('journal_mode = WAL');
      return;
    } catch (error) {
      if (!/BUSY|LOCKED/.test((error as { code?: string }).code ?? '') || monotonicMs() > deadline) throw error;
      // Synchronous, as opening is: a few ms, then longer, never over 100.
      Atomics.wait(pause, 0, 0, Math.min(100, 2 ** attempt) * (0.5 + Math.random()));
    }
  }
}

export interface OpenStoreOptions {
  tool: string;
  now?: () => number;
  /** This process's own steady clock (ms), for leases: another host's clock is never trusted. */
  monotonic?: () => number;
  /** Who this machine is in `runs` (ENRICH_HOST; store/open.ts hostIdentity): the host name unless given. */
  host?: string;
  /** Who runs, in `runs`: the login name unless given. */
  user?: string;
}

/** How Store.open may use the file: by default it writes, and creates a store where there is none. */
export interface OpenAccess {
  access?: StoreAccess;
  /** Whether a store is made where there is none (never for `read`). */
  create?: boolean;
}

/** A store a read-only open found in an earlier layout: it is opened to write, and upgraded. */
class NeedsUpgrade extends Error {}

/** The personal store: one SQLite file in WAL mode (a reader works beside a writer), shared by this machine's runs; WAL needs one host, so no network share. */
export class Store implements Connection {
  /** What every key derives from: the store's id, and the key epoch a prune bumps (read again as each run starts). */
  storeId: string;
  readonly host: string;
  readonly user: string;
  private readonly services = new Map<string, number>();

  private constructor(
    readonly path: string,
    readonly db: Db,
    readonly options: Required<Pick<OpenStoreOptions, 'tool' | 'now' | 'monotonic'>>,
    private readonly id: string,
    who: Pick<OpenStoreOptions, 'host' | 'user'>,
  ) {
    this.host = who.host ?? hostname();
    this.user = who.user ?? loginName();
    this.storeId = this.withEpoch(id);
  }

  /** Pruning forgets generations: the epoch it bumps keeps later keys from repeating earlier ones. */
  private withEpoch(id: string): string {
    const epoch = Number(this.meta('key_epoch') ?? 0);
    return epoch > 0 ? `${id}.${epoch}` : id;
  }

  /** After a prune: keys derived from now on can never repeat one sent before it. */
  bumpKeyEpoch(): void {
    this.db.prepare("INSERT INTO meta (key, value) VALUES ('key_epoch', '1') ON CONFLICT (key) DO UPDATE SET value = CAST(value AS INTEGER) + 1").run();
  }

  /**
   * Opens the store at `path`, or atomically makes one unless `read` or `create: false`; anything else there is refused, never
   * taken for a new store. Only SQLite opens the file: any other descriptor closed in this process would drop its fcntl locks.
   */
  static open(path: string, options: OpenStoreOptions & OpenAccess): Store {
    const full = { tool: options.tool, now: options.now ?? (() => Date.now()), monotonic: options.monotonic ?? monotonicMs };
    const access = options.access ?? 'write';
    if (!storeFileThere(path)) {
      if (access === 'read' || options.create === false) throw new UsageError(`no store at ${path}; give --store <path> (or ENRICH_STORE) to use another`);
      try {
        makeDirs(dirname(path), 0o700);
        createStoreFile(path, full.now());
      } catch (error) {
        throw new UsageError(`cannot open the store ${path}: ${describeOpenError(error)}; pass --store <path> (or ENRICH_STORE) to use another`, { cause: error });
      }
    }
    let db: Db;
    try {
      db = connectStore(path, access);
    } catch (error) {
      throw openFailure(path, error);
    }
    try {
      return new Store(path, db, full, prepareConnection(db, path, access), { ...(options.host === undefined ? {} : { host: options.host }), ...(options.user === undefined ? {} : { user: options.user }) });
    } catch (error) {
      db.close();
      if (error instanceof NeedsUpgrade) return Store.upgrade(path, options);
      throw openFailure(path, error);
    }
  }

  /** Reading needs the current layout: a store of an earlier one is brought up to date, as a run would. */
  private static upgrade(path: string, options: OpenStoreOptions): Store {
    try {
      return Store.open(path, { ...options, access: 'write', create: false });
    } catch (error) {
      throw new UsageError(`the store ${path} has the layout of an earlier enrich, and could not be upgraded to be read: ${errorMessage(error)}`, { cause: error });
    }
  }

  private meta(key: string): string | undefined {
    const row = this.sql('SELECT value FROM meta WHERE key = ?').raw(true).get([key]) as [string] | undefined;
    return row?.[0];
  }

  /** The store's id with its key epoch as it is now (storeId is as of the run's start). */
  currentStoreId(): string {
    return this.withEpoch(this.id);
  }

  private readonly statements = new Map<string, Statement>();

  /** A prepared statement, compiled once per text: the hot paths run thousands a second. */
  sql(text: string): Statement {
    let statement = this.statements.get(text);
    if (statement === undefined) {
      statement = this.db.prepare(text) as unknown as Statement;
      this.statements.set(text, statement);
    }
    return statement;
  }

  serviceId(name: string): number {
    let id = this.services.get(name);
    if (id === undefined) {
      this.db.prepare('INSERT OR IGNORE INTO services (name) VALUES (?)').run(name);
      id = (this.db.prepare('SELECT id FROM services WHERE name = ?').raw(true).get(name) as [number])[0];
      this.services.set(name, id);
    }
    return id;
  }

  /** Opens a run against one service: its records, and a row in `runs` saying it is under way. */
  beginRun(service: string, info: RunInfo, writer: WriterChoice = { kind: 'inline' }): ServiceRecords {
    let run: { serviceId: number; id: number; policyNow: number };
    try {
      run = this.insertRun(service, info);
    } catch (error) {
      // Locked past the busy timeout, a full disk: one line, not an "unexpected error".
      throw new StoreWriteError(this.path, error);
    }
    const records = new ServiceRecords(this, service, run.serviceId, run.id, run.policyNow, writer);
    records.startHeartbeat();
    return records;
  }

  private insertRun(service: string, info: RunInfo): { serviceId: number; id: number; policyNow: number } {
    const serviceId = this.serviceId(service);
    const now = this.options.now();
    const policyNow = this.policyNow(serviceId, info, now);
    const result = this.db
      .prepare(
        `INSERT INTO runs (service, started_at, heartbeat_at, policy_now, pid, host, user, tool, input_name, input_sha256, rows, dry_run, options, status)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'running')`,
      )
      .run(serviceId, now, now, policyNow, process.pid, this.host, this.user, this.options.tool, info.inputName, info.inputSha256, info.rows, info.dryRun ? 1 : 0, JSON.stringify(info.options));
    // Read once the run is registered: a prune committed since bumped the epoch, and one not yet committed cannot start now (it sees this run alive).
    this.storeId = this.withEpoch(this.id);
    return { serviceId, id: Number(result.lastInsertRowid), policyNow };
  }

  /** When freshness is judged (run-records.ts policyNowAfter). */
  private policyNow(serviceId: number, info: RunInfo, now: number): number {
    const maxAge = info.options['max_age_ms'] ?? null;
    if (maxAge === null) return now;
    const last = this.sql(
      `SELECT id, status, policy_now, json_extract(options, '$.max_age_ms') FROM runs
         WHERE service = ? AND input_sha256 = ? AND dry_run = 0 ORDER BY id DESC LIMIT 1`,
    )
      .raw(true)
      .get(serviceId, info.inputSha256) as [number, string, number | null, number | null] | undefined;
    return policyNowAfter(last && { status: last[1], policyNow: last[2], maxAge: last[3], alive: () => this.runAlive(last[0]) }, Number(maxAge), now);
  }

  /** Whether a run may still be sending under its intents: marked running, a recent heartbeat (a lease a dead process cannot renew), and on this host its process exists. */
  runAlive(run: number, now = this.options.now()): boolean {
    const row = this.sql('SELECT pid, host, status, coalesce(heartbeat_at, started_at), started_at FROM runs WHERE id = ?').raw(true).get(run) as
      | [number, string, string, number, number]
      | undefined;
    if (row === undefined || row[2] !== 'running') return false;
    const [pid, host, , beat, startedAt] = row;
    // Another host cannot be probed: its heartbeat is all there is to go by.
    if (host !== this.host) return this.beating(run, Number(beat), now);
    // On this host an existing process is alive even if it stopped beating (Ctrl-Z, a paused VM); only one started after
    // the run, with the heartbeat stopped too, is another program under a reused pid.
    return !goneOnThisHost(pid, startedAt, () => this.beating(run, Number(beat), now));
  }

  /** The heartbeat each run on another host was last seen with, and when (this process's steady clock). */
  private readonly beats = new Map<number, { beat: number; seenAt: number }>();

  /**
   * Whether a run on another host (or a possibly reused pid here) still beats. Its heartbeat is on that host's clock: one older than the
   * lease by ours is dead at once (its keys are taken over and replayed free); any other is alive only while it keeps changing.
   */
  private beating(run: number, beat: number, now: number): boolean {
    if (now - beat > LEASE_MS) return false;
    const at = this.options.monotonic();
    const seen = this.beats.get(run);
    if (seen === undefined || seen.beat !== beat) {
      this.beats.set(run, { beat, seenAt: at });
      return true;
    }
    return at - seen.seenAt <= LEASE_MS;
  }

  /** Records of one service without a run (the ledger, imports). */
  records(service: string): ServiceRecords {
    return new ServiceRecords(this, service, this.serviceId(service), null);
  }

  // ---- an 0.1 journal's import (store/import-journal.ts JournalTarget) ----

  async importedBytes(path: string): Promise<number | null> {
    const done = this.db.prepare('SELECT bytes FROM imports WHERE path = ?').raw(true).get(path) as [number] | undefined;
    return done?.[0] ?? null;
  }

  async importer(service: string): Promise<{ importEvents(events: JournalEvents): Promise<void>; loadCompanies: ServiceRecords['loadCompanies'] }> {
    const records = this.records(service);
    return { importEvents: async (events) => records.importEvents(events), loadCompanies: (companies, visit) => records.loadCompanies(companies, visit) };
  }

  async markImported(path: string, bytes: number, companies: number): Promise<void> {
    this.db.prepare('INSERT OR REPLACE INTO imports (path, bytes, imported_at, companies) VALUES (?, ?, ?, ?)').run(path, bytes, Date.now(), companies);
  }

  /** PRAGMA integrity_check (about 0.2 s for 200,000 companies): the problems it names, none when sound. */
  integrityProblems(limit = 10): string[] {
    try {
      const rows = this.db.prepare(`PRAGMA integrity_check(${limit})`).raw(true).all() as [string][];
      return rows.map(([line]) => line).filter((line) => line !== 'ok');
    } catch (error) {
      // Damage bad enough that the check cannot even walk the file.
      if (isDamage(error)) return [errorMessage(error)];
      throw error;
    }
  }

  sizeOnDisk(): number {
    let total = 0;
    for (const suffix of ['', '-wal', '-shm']) {
      try {
        total += statSync(this.path + suffix).size;
      } catch {
        // absent: nothing to count
      }
    }
    return total;
  }

  close(): void {
    if (this.db.open) this.db.close();
  }
}


/** Whether a file is at `path`. A directory or an empty file is refused: SQLite would take an empty file for a new store, and all it held be bought again. */
function storeFileThere(path: string): boolean {
  const found = statOrNull(path);
  if (found === null) return false;
  if (found.isDirectory()) throw new UsageError(`the store ${path} is a directory; give a file path with --store or ENRICH_STORE`);
  if (found.isFile() && found.size === 0) {
    throw new UsageError(`the store ${path} is an empty file, not a store (a truncated copy?): if it held your purchases, restore it from a backup; else remove it, and a run makes a new store there`);
  }
  return true;
}

/** Settings, identity and layout of a new connection: the store's id, once it is known usable. */
function prepareConnection(db: Db, path: string, access: StoreAccess): string {
  // First: every later statement may meet another process's transaction and must wait.
  db.pragma(`busy_timeout = ${BUSY_TIMEOUT_MS}`);
  // Before anything is written: a file that is not an enrich store is left as it is.
  const id = storeIdOf(db, path);
  const version = Number((db.pragma('user_version', { simple: true }) as number | undefined) ?? 0);
  if (version > SCHEMA_VERSION) {
    throw new UsageError(`the store ${path} was written by a newer enrich (schema ${version}); upgrade enrich to use it`);
  }
  db.pragma('foreign_keys = ON');
  if (access === 'read') {
    if (version < SCHEMA_VERSION || missingColumns(db).length > 0) throw new NeedsUpgrade();
    return id;
  }
  enableWal(db);
  db.pragma('synchronous = FULL');
  db.exec(SCHEMA);
  // An upgrade in one write transaction, its columns looked for again inside it: two processes
  // opening an older store at once would otherwise both add a column, and the second fail.
  const upgrading = version < SCHEMA_VERSION || missingColumns(db).length > 0;
  if (upgrading) db.exec('BEGIN IMMEDIATE');
  try {
    checkColumns(db, path);
    db.exec(LATE_INDEXES);
    if (version < SCHEMA_VERSION) db.pragma(`user_version = ${SCHEMA_VERSION}`);
    if (upgrading) db.exec('COMMIT');
  } catch (error) {
    if (db.inTransaction) db.exec('ROLLBACK');
    throw error;
  }
  return id;
}

/** The store's identity (every key derives from it); a file without one is not an enrich store. */
function storeIdOf(db: Db, path: string): string {
  const notStore = (): UsageError =>
    new UsageError(`the store ${path} is not an enrich store (an SQLite database without enrich's store id); give --store (or ENRICH_STORE) the path of your store, or of a new one`);
  let row: [string] | undefined;
  try {
    row = db.prepare("SELECT value FROM meta WHERE key = 'store_id'").raw(true).get() as [string] | undefined;
  } catch (error) {
    if (/no such table|no such column/.test(errorMessage(error))) throw notStore();
    throw error;
  }
  if (row === undefined || typeof row[0] !== 'string' || row[0] === '') throw notStore();
  return row[0];
}

/** An open that failed, in one line: damaged, not a store, or what SQLite said. */
function openFailure(path: string, error: unknown): EnrichError {
  if (error instanceof EnrichError) return error;
  const code = sqliteCode(error);
  if (code === 'SQLITE_CORRUPT') return new StoreDamagedError(path, false, error);
  if (code === 'SQLITE_NOTADB') {
    return new UsageError(`the store ${path} is damaged or not an enrich store (SQLite: ${errorMessage(error)}): if it held your purchases, move it aside and restore it from a backup; else give --store (or ENRICH_STORE) another path`, { cause: error });
  }
  return new UsageError(`cannot use the store ${path}: ${describeSqliteError(error)}; pass --store <path> to use another`, { cause: error });
}

/** Each expected column the store lacks: table, column, and whether ADD COLUMN can add it. */
function missingColumns(db: Db): [string, string, boolean][] {
  const missing: [string, string, boolean][] = [];
  for (const [table, columns] of expectedColumns()) {
    const present = new Set((db.prepare(`PRAGMA table_info(${table})`).all() as { name: string }[]).map((c) => c.name));
    for (const [column, definition] of columns) {
      // Nullable or with a default, so ADD COLUMN is safe.
      const addable = !/PRIMARY KEY/i.test(definition) && (!/NOT NULL/i.test(definition) || /DEFAULT/i.test(definition));
      if (!present.has(column)) missing.push([table, column, addable]);
    }
  }
  return missing;
}

/** Adds the columns added since an earlier build; refuses a store still lacking one this enrich writes (hand-edited, or damaged). */
function checkColumns(db: Db, path: string): void {
  const missing = missingColumns(db);
  for (const [table, column, addable] of missing) {
    const definition = expectedColumns().get(table)?.get(column) as string;
    if (addable) db.exec(`ALTER TABLE ${table} ADD COLUMN ${column} ${definition.replace(/\s+REFERENCES.*$/i, '')}`);
  }
  const lacking = missing.filter(([, , addable]) => !addable);
  if (lacking.length > 0) {
    throw new UsageError(`the store ${path} lacks ${lacking.map(([table, column]) => `${table}.${column}`).join(', ')}: it was damaged or edited by hand; restore it from a backup, or pass --store <path> to use another`);
  }
}

function describeOpenError(error: unknown): string {
  const code = (error as NodeJS.ErrnoException).code;
  if (code === 'EACCES' || code === 'EPERM') return 'permission denied';
  if (code === 'EROFS') return 'the file system is read-only';
  if (code === 'ENOSPC') return 'the disk is full';
  if (code === 'EISDIR') return 'it is a directory';
  if (code === 'ENOTDIR' || code === 'EEXIST') return 'a parent is not a directory';
  if (code === 'ENOENT') return 'no folder can be made there';
  return describeSqliteError(error);
}
