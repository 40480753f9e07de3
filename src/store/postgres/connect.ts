import pg from 'pg';
import type { ConnectionNotice } from '../types.js';
import { EnrichError, UsageError } from '../../errors.js';

/** bigint columns (ms since the epoch, run ids) as numbers: every value the store keeps fits in 2^53. */
const types = {
  getTypeParser: ((oid: number, format?: 'text' | 'binary') => (oid === 20 ? (v: string) => Number(v) : pg.types.getTypeParser(oid, format as 'text'))) as pg.CustomTypesConfig['getTypeParser'],
};

export interface Place {
  host: string;
  port: number;
  database: string;
}

/** How long a connection attempt may take before the store is called unreachable. */
const CONNECT_TIMEOUT_MS = 10_000;
/** A statement with no answer for this long is taken for a connection lost (every statement enrich sends takes well under a second). */
export const QUERY_TIMEOUT_MS = 60_000;

/**
 * sslmode as psql and every libpq client read it (require: encrypted, unchecked; verify-full: checked), not node-pg's own
 * (require taken for verify-full, with a warning), so a managed PostgreSQL's address works as it does in psql.
 */
export function libpqAddress(url: string, env: NodeJS.ProcessEnv = process.env): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return url;
  }
  if (u.searchParams.has('uselibpqcompat')) return url;
  // PGSSLMODE stands for an sslmode the address leaves out, as in psql (node-pg reads it its own way).
  const mode = u.searchParams.get('sslmode') ?? env['PGSSLMODE']?.trim() ?? '';
  if (mode === 'verify-ca' && !u.searchParams.has('sslrootcert')) {
    throw new UsageError('sslmode=verify-ca checks the server against a CA of your own: add sslrootcert=<file> to the address (or use verify-full, against the system CAs)');
  }
  // no-verify is node-pg's own word (encrypted, not checked): left to it. allow is not supported by node-pg: left to it too.
  if (!['disable', 'prefer', 'require', 'verify-ca', 'verify-full'].includes(mode)) return url;
  u.searchParams.set('sslmode', mode);
  u.searchParams.set('uselibpqcompat', 'true');
  return u.toString();
}

/** A client for `url` (PG* variables and ~/.pgpass fill the gaps, as for psql); `pipeline` sends each query without awaiting the last. */
export function client(url: string, pipeline = false, timeoutMs = QUERY_TIMEOUT_MS): pg.Client {
  const c = new pg.Client({
    connectionString: libpqAddress(url),
    types,
    pipeline,
    connectionTimeoutMillis: Math.min(CONNECT_TIMEOUT_MS, timeoutMs),
    // A network that goes silent (a dropped NAT or VPN flow, a suspended host) is never reset:
    // keepalives find it, and a statement unanswered this long is taken for a lost connection.
    query_timeout: timeoutMs,
    keepAlive: true,
    keepAliveInitialDelayMillis: 10_000,
    application_name: 'enrich',
  });
  // A connection lost while idle (a server restarting) emits 'error', which with no listener ends the process;
  // every statement on it still fails, and is handled there.
  c.on('error', () => {});
  return c;
}

/** Where a client connects, never with its password: for messages. */
export function placeOf(c: pg.Client): Place {
  return { host: c.host.startsWith('/') ? `socket ${c.host}` : c.host, port: c.port, database: c.database ?? '' };
}

/** Connects, or says in one line why the team store cannot be used. */
export async function connect(c: pg.Client): Promise<pg.Client> {
  try {
    await c.connect();
    return c;
  } catch (error) {
    throw connectFailure(placeOf(c), error);
  }
}

/** Why a connection failed: the login refused, no such database, or the server not reached at all. */
export type FailureClass = 'login' | 'database' | 'tls' | 'unreachable';

/** A TLS setting that will never work as given: the server takes no TLS, or its certificate fails the check asked for. */
const TLS_REFUSED = /does not support SSL connections|self[- ]signed certificate|unable to (verify|get local issuer)|certificate has expired|Hostname\/IP does not match/i;

export function failureClass(error: unknown): FailureClass {
  const code = (error as { code?: string }).code ?? '';
  if (code === '28P01' || code === '28000') return 'login';
  if (code === '3D000') return 'database';
  if (TLS_REFUSED.test((error as Error).message ?? '')) return 'tls';
  return 'unreachable';
}

/** One line naming the host and the cause, never the password. */
export function connectFailure(place: Place, error: unknown): EnrichError {
  const failure = failureClass(error);
  const at = `${place.host}:${place.port}`;
  const then = 'nothing was sent to the service';
  if (failure === 'login') return new UsageError(`the team store at ${at} refused the login (${describe(error)}); check the user and password (PGPASSWORD or ~/.pgpass); ${then}`, { cause: error });
  if (failure === 'database') return new UsageError(`the team store at ${at} has no database ${place.database}; create it (createdb ${place.database}) or fix the address; ${then}`, { cause: error });
  if (failure === 'tls') return new UsageError(`${tlsAdvice(at, error)}; ${then}`, { cause: error });
  return new EnrichError(`cannot reach the team store at ${at}: ${describe(error)}; ${then}, rerun the same command later`, 'unavailable', { cause: error });
}

/** What to change when TLS cannot work as the address asks (sslmode, as psql reads it). */
export function tlsAdvice(at: string, error: unknown): string {
  const message = printableMessage(error);
  if (/does not support SSL/i.test(message)) return `the team store at ${at} takes no TLS connections and the address asks for them (sslmode, or PGSSLMODE; prefer too, which this client does not fall back from): enable TLS on the server, or give sslmode=disable where the network is trusted`;
  return `the team store at ${at} presented a certificate that fails the check the address asks for (${message}): give the CA that signed it (sslrootcert=<file>); only on a network you trust, sslmode=require encrypts without checking`;
}

const printableMessage = (error: unknown): string => String((error as Error).message ?? error).replace(/\s+/g, ' ').slice(0, 200);

/** A cause as a person reads it. */
export function describe(error: unknown): string {
  const code = (error as { code?: string }).code ?? '';
  if (code === 'ECONNREFUSED') return 'connection refused (is PostgreSQL running there?)';
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return 'the host name does not resolve';
  if (code === 'ETIMEDOUT' || /timeout/i.test((error as Error).message ?? '')) return 'no answer in time';
  if (code === 'ECONNRESET') return 'the connection was reset';
  const message = error instanceof Error ? error.message : String(error);
  // The server's messages never carry the password; the first line is enough.
  return message.split('\n')[0] ?? message;
}

export interface Queryable {
  query<R extends pg.QueryResultRow = Record<string, unknown>>(text: string, values?: unknown[]): Promise<pg.QueryResult<R>>;
}

/**
 * Whether `c` keeps its session across transactions (direct, or a session-mode pooler): LISTEN, then look for it while a second
 * connection holds a transaction open, so a pooler handing sessions round must give `c` another (or none within `waitMs`).
 * Throws when no second connection can be had.
 */
export async function keepsSessionSurely(c: Queryable, url: string, waitMs = 2_000): Promise<boolean> {
  const channel = probeChannel();
  await c.query(`LISTEN ${channel}`);
  const other = client(url);
  try {
    await other.connect();
    await other.query('BEGIN');
    await other.query('SELECT 1');
    const look = c.query<{ kept: boolean }>('SELECT $1::text IN (SELECT pg_listening_channels()) AS kept', [channel]).then((r) => r.rows[0]?.kept === true);
    let timer: NodeJS.Timeout | undefined;
    const kept = await Promise.race([look, new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), waitMs)))]);
    clearTimeout(timer);
    await other.query('ROLLBACK');
    await look;
    return kept;
  } finally {
    await other.end().catch(() => {});
    await c.query(`UNLISTEN ${channel}`).catch(() => {});
  }
}

/** A channel no other process listens on, even one whose pid repeats this one's (PID 1 in every container). */
export function probeChannel(): string {
  return `enrich_probe_${Buffer.from(globalThis.crypto.getRandomValues(new Uint8Array(6))).toString('hex')}`;
}

/** How long a run keeps trying to reach the team store again after losing it, before it stops. */
export const RECONNECT_MS = 30_000;

/** A statement sent after its Session ended: never sent, and never taken for a lost connection (retried for the reconnect budget). */
export class SessionEnded extends EnrichError {
  constructor() {
    super('the session with the team store had ended; the statement was not sent', 'failure');
  }
}

/** Whether the connection or server went away, rather than a statement being wrong: 08 (connection), 57P01-03 (shutdown, crash, starting), 25P03. */
export function isConnectionLoss(error: unknown): boolean {
  if (error instanceof SessionEnded) return false;
  const code = String((error as { code?: unknown } | null)?.code ?? '');
  if (/^(ECONNRESET|ECONNREFUSED|EPIPE|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH|ENOTFOUND|EAI_AGAIN)$/.test(code)) return true;
  // 25P03: the server ended a transaction left idle (IDLE_IN_TRANSACTION_MS), and its connection with it.
  if (code.startsWith('08') || code === '57P01' || code === '57P02' || code === '57P03' || code === '25P03') return true;
  const message = error instanceof Error ? error.message : '';
  return /connection terminated|connection error|not queryable|timeout expired|query read timeout|connection.*(closed|ended)/i.test(message);
}

/** A lock wait of at most `ms`, under half the query timeout, so a held lock is reported as such (lock_not_available), not as a server that stopped answering. */
export const lockWait = (ms: number, queryTimeoutMs: number): number => Math.min(ms, Math.floor(queryTimeoutMs / 2));

/** A lock waited for up to `lock_timeout` and not got (lock_not_available). */
export const isLockTimeout = (error: unknown): boolean => (error as { code?: unknown } | null)?.code === '55P03';

/** A deadlock (40P01) or serialization failure (40001, e.g. a lone statement under a REPEATABLE READ default): rolled back whole, so sending again is safe. */
export const isRetryableConflict = (error: unknown): boolean => {
  const code = (error as { code?: unknown } | null)?.code;
  return code === '40001' || code === '40P01';
};

/** How many times at most a statement or a batch is sent while the server rolls it back for a conflict. */
export const CONFLICT_RETRIES = 5;

const pause = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** The one listener for the process's losses of the team store (the run's reporter): one notice per loss, however many statements met it. */
let notice: ((n: ConnectionNotice) => void) | null = null;
let lostAt: number | null = null;
export function onConnectionNotice(listener: ((n: ConnectionNotice) => void) | null): void {
  notice = listener;
  lostAt = null;
  abandoned = false;
}

/** Ctrl-C while the store is lost stops waiting out the loss; one while it answers leaves the budget, so a blip cannot cost the outcomes of calls already paid for. */
let abandoned = false;
export function abandonReconnects(): void {
  if (lostAt !== null) abandoned = true;
}

/** Runs `attempt` again while it fails for a lost connection, up to `budgetMs` from the first loss (backing off 100 ms to 2 s); anything else is thrown. */
export async function reconnecting<T>(attempt: () => Promise<T>, budgetMs: number, lost?: (error: unknown) => void): Promise<T> {
  let since: number | null = null;
  let delay = 100;
  for (;;) {
    try {
      const result = await attempt();
      if (since !== null && lostAt !== null) {
        notice?.({ lost: false, afterMs: performance.now() - lostAt });
        lostAt = null;
      }
      return result;
    } catch (error) {
      if (!isConnectionLoss(error)) {
        // The server answered (with an error of its own): it is back.
        if (since !== null && lostAt !== null) {
          notice?.({ lost: false, afterMs: performance.now() - lostAt });
          lostAt = null;
        }
        throw error;
      }
      lost?.(error);
      if (lostAt === null) {
        lostAt = performance.now();
        notice?.({ lost: true, why: describe(error), budgetMs });
      }
      since ??= performance.now();
      if (abandoned || performance.now() - since + delay > budgetMs) throw error;
      await pause(delay);
      delay = Math.min(delay * 2, 2_000);
    }
  }
}

/**
 * The server ends an enrich transaction idle this long, and its locks with it: a stopped process (a closed lid, SIGSTOP) must not
 * hold companies from every other machine. enrich never waits mid-transaction on anything but the server.
 */
export const IDLE_IN_TRANSACTION_MS = 10_000;

/** `work` in one transaction: committed, or rolled back and its error thrown. `lockTimeoutMs` bounds each lock wait (SET LOCAL: it ends with the transaction). */
export async function inTransaction<T>(db: { query(text: string): Promise<unknown> }, work: () => Promise<T>, lockTimeoutMs?: number): Promise<T> {
  // Every transaction is written for READ COMMITTED, whatever the default; said on each BEGIN, as a pooler may not keep a session's SET.
  await db.query('BEGIN ISOLATION LEVEL READ COMMITTED');
  try {
    await db.query(`SET LOCAL idle_in_transaction_session_timeout = ${IDLE_IN_TRANSACTION_MS}`);
    if (lockTimeoutMs !== undefined) await db.query(`SET LOCAL lock_timeout = ${lockTimeoutMs}`);
    const result = await work();
    await db.query('COMMIT');
    return result;
  } catch (error) {
    await db.query('ROLLBACK').catch(() => {});
    throw error;
  }
}

/**
 * A connection that reconnects and repeats a lost statement, for up to RECONNECT_MS. Only statements safe to send twice go on their
 * own; inside a transaction a loss is thrown, never repeated, since what came before it in the transaction is gone.
 */
export class Session {
  private current: pg.Client | null;
  private inTransaction = false;
  /** Holds state a new connection would not have (a session advisory lock): a loss is thrown, as in a transaction. */
  private pinned = false;

  constructor(
    private readonly url: string,
    first: pg.Client,
    private readonly budgetMs = RECONNECT_MS,
    private readonly timeoutMs = QUERY_TIMEOUT_MS,
  ) {
    this.current = this.watch(first);
  }

  /** Where it connects, never with the password. */
  get place(): Place {
    const c = this.current ?? client(this.url, false, this.timeoutMs);
    return placeOf(c);
  }

  private watch(c: pg.Client): pg.Client {
    c.on('error', () => {
      if (this.current === c) this.current = null;
    });
    return c;
  }

  private async connected(): Promise<pg.Client> {
    // Ended: a statement still waiting to reconnect (a poll, a heartbeat) must not open a connection that keeps the process alive.
    if (this.ended) throw new SessionEnded();
    if (this.current === null) {
      const c = this.watch(client(this.url, false, this.timeoutMs));
      try {
        await c.connect();
      } catch (error) {
        void c.end().catch(() => {});
        throw error;
      }
      this.current = c;
    }
    return this.current;
  }

  /** A session advisory lock (waiting at most `waitMs`, then 55P03), pinned to this connection until `unlock`: reconnecting would silently go on without it. */
  async lock(key: number, waitMs: number): Promise<void> {
    // The lock outlives the transaction; the timeout (LOCAL) ends with it.
    await inTransaction(this, () => this.query('SELECT pg_advisory_lock($1)', [key]), waitMs);
    this.pinned = true;
  }

  /** Lets the lock go once the statements sent before are done (with a lost connection it went already). */
  async unlock(key: number): Promise<void> {
    await this.tail;
    const held = this.current !== null;
    this.pinned = false;
    if (held) await this.query('SELECT pg_advisory_unlock($1)', [key]);
  }

  /** The statement before this one: statements go one at a time, as one connection runs them. */
  private tail: Promise<unknown> = Promise.resolve();

  /** Sends once those before are done: only one caller at a time may find the connection lost and reconnect (no connection made, then forgotten). */
  query<R extends pg.QueryResultRow = Record<string, unknown>>(text: string, values?: unknown[]): Promise<pg.QueryResult<R>> {
    const run = this.tail.then(() => this.send<R>(text, values));
    this.tail = run.catch(() => {});
    return run;
  }

  private async send<R extends pg.QueryResultRow>(text: string, values?: unknown[]): Promise<pg.QueryResult<R>> {
    const once = async (): Promise<pg.QueryResult<R>> => {
      const c = await this.connected();
      try {
        const result = await c.query<R>(text, values);
        if (/^\s*(BEGIN|START\s+TRANSACTION)\b/i.test(text)) this.inTransaction = true;
        else if (/^\s*(COMMIT|ROLLBACK|END|ABORT)\b/i.test(text)) this.inTransaction = false;
        return result;
      } catch (error) {
        if (isConnectionLoss(error)) {
          if (this.current === c) this.current = null;
          void c.end().catch(() => {});
        }
        throw error;
      }
    };
    // A lock or a transaction lives on its connection: what follows must never run on a new one, without it.
    const held = this.pinned ? 'the lock it held' : this.inTransaction ? 'the transaction it was in' : null;
    if (held !== null) return this.onItsConnection(once, held);
    // The ROLLBACK after a transaction lost with its connection: nothing is left to undo, and a
    // server that is down must not hold the error up while a new connection is tried for.
    if (this.current === null && /^\s*ROLLBACK\s*$/i.test(text)) return { command: 'ROLLBACK', rowCount: null, oid: 0, fields: [], rows: [] };
    // A lone statement is its own transaction: one rolled back for a conflict did nothing, and is sent again.
    // (Inside the reconnect loop: one budget for losses, however many conflicts came between.)
    const untilNoConflict = async (): Promise<pg.QueryResult<R>> => {
      for (let attempt = 1; ; attempt++) {
        try {
          return await once();
        } catch (error) {
          if (!isRetryableConflict(error) || attempt >= CONFLICT_RETRIES) throw error;
        }
      }
    };
    return reconnecting(untilNoConflict, this.budgetMs);
  }

  /** A statement on the connection holding `what` (a lock, a transaction), never replaced: lost, it took what it held with it. */
  private async onItsConnection<R>(once: () => Promise<R>, what: string): Promise<R> {
    if (this.current === null) {
      this.inTransaction = false;
      throw this.lost(what);
    }
    try {
      return await once();
    } catch (error) {
      if (!isConnectionLoss(error)) throw error;
      this.inTransaction = false;
      throw this.lost(what, error);
    }
  }

  /** The connection was lost with `what` it held: said in one line, as the store being unavailable. */
  private lost(what: string, cause?: unknown): EnrichError {
    const { host, port, database } = this.place;
    return new EnrichError(`lost the connection to the team store (database ${database} on ${host}:${port}), and ${what} with it; stopped there, keeping what was committed`, 'unavailable', { cause });
  }

  private ended = false;

  async end(): Promise<void> {
    const c = this.current;
    this.current = null;
    this.ended = true;
    await c?.end().catch(() => {});
  }
}
