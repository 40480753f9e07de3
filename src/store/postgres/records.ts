import type pg from 'pg';
import type { CompanyRecord } from '../../api/types.js';
import { EnrichError } from '../../errors.js';
import { isProcessAlive } from '../../process-alive.js';
import type { Claim, CompanyState, Lookup, RunEnd, ServiceStore } from '../types.js';
import type { JournalEvents } from '../import-journal.js';
import { parseRecord, RunRecords } from '../run-records.js';
import { client, connect, describe, inTransaction, isConnectionLoss, isLockTimeout, lockWait, placeOf, reconnecting, type Session } from './connect.js';
import { NOW_MS } from './schema.js';
import { AGAIN, GroupCommit, type Queued } from '../group-commit.js';
import { Heartbeat } from '../heartbeat.js';
import { BATCH_LOCK_WAIT_MS, BatchPlan, commitBatch, LEASE_MS, notice, OK, OUTCOME_CHANNEL, Statistics, type Claimed } from './writer.js';

/** How long a run's release of its claims at the end waits for a table another session holds; then they are left to the lease. */
const RELEASE_WAIT_MS = 1_000;

/** Outcomes gather 20 ms (or 5,000 rows) before a commit; an intent waits only 1 ms. */
const TIMING = { batchMs: 20, batchRows: 5_000, intentGatherMs: 1 };
/** Events of an imported journal per transaction: few enough company locks for any server. */
const IMPORT_CHUNK = 1_000;
/** Keys per read statement: one round trip each, pipelined by none, small enough for any server. */
const READ_CHUNK = 20_000;

/**
 * The team store cannot be written: every paid call stops, since none may go unrecorded. Lost past the reconnect budget it is unavailable
 * (exit 6: sent calls' intents are durable, and a rerun replays them under the same keys); any other refusal is exit 1.
 */
export class PgWriteError extends EnrichError {
  override readonly name = 'PgWriteError';
  /** The store went out of reach: nothing more is written on the way out (no second wait for it). */
  readonly lost: boolean;
  /** `queryTimeoutMs`: how long a statement may go unanswered before its connection is taken for lost. */
  constructor(where: string, cause: unknown, budgetMs: number, lockWaitMs: number, queryTimeoutMs: number) {
    const resume = 'what was sent resumes under the same keys, nothing is bought twice';
    super(
      isConnectionLoss(cause)
        ? describe(cause) === 'no answer in time'
          ? // A pooler (in either mode) queues a client until a server connection is free: a pool
            // too small for the runs sharing it looks like a server that stopped answering.
            `no answer from the team store at ${where} in ${queryTimeoutMs / 1000} s, nor again within ${budgetMs / 1000} s: a pooler whose pool has no server connection free waits like this (too small for the runs sharing it: raise its pool size, PgBouncer's default_pool_size or the provider's setting), as does a server that stopped answering; no further paid call was made. Run the same command once it answers: ${resume}`
          : `lost the team store at ${where} (${describe(cause)}) and could not reach it again within ${budgetMs / 1000} s; no further paid call was made. Run the same command once it is back: ${resume}`
        : isLockTimeout(cause)
          ? `cannot write the team store at ${where}: another session has held companies this run writes for ${lockWaitMs / 1000} s (an open transaction); no further paid call was made. Run the same command once it is done: ${resume}`
          : `cannot write the team store at ${where} (${describe(cause)}); no further paid call was made. Fix that, then run the same command to resume`,
      isConnectionLoss(cause) || isLockTimeout(cause) ? 'unavailable' : 'failure',
      { cause },
    );
    this.lost = isConnectionLoss(cause);
  }
}

function chunks<T>(list: readonly T[]): T[][] {
  const out: T[][] = [];
  for (let at = 0; at < list.length; at += READ_CHUNK) out.push(list.slice(at, at + READ_CHUNK));
  return out;
}

/** What a run's records use of the team store that opened them (store.ts PgStore). */
export interface RecordsHost {
  readonly url: string;
  readonly db: Session;
  readonly storeId: string;
  readonly host: string;
  readonly boot: string | null;
  readonly now: () => number;
  /** This host's own clock, for what it measures against itself (the lease's lapse, heartbeat.ts). */
  readonly hostNow: () => number;
  readonly reconnectMs: number;
  readonly queryTimeoutMs: number;
  /** Whether a connection keeps its session between transactions (store.ts sessionAndClock). */
  readonly keepsSession: boolean;
  /** The server's clock, which each heartbeat's answer reads again (store.ts ServerClock). */
  readonly clock?: { observe(serverMs: number, sentAt: number, backAt: number): void };
}

/** Prepared statement does not exist, already exists; cached plan must not change result type. */
const PREPARED_GONE = new Set(['26000', '42P05', '0A000']);

/**
 * One service's records in the team store and one run's writes. Reads are single statements (one moment each); writes are group-committed,
 * two pipelined round trips a batch (writer.ts). A waiter is woken by its outcome's NOTIFY, and polls too: notifications are lost while reconnecting.
 */
export class PgRecords extends RunRecords implements ServiceStore {
  readonly storeId: string;
  protected readonly group: GroupCommit;
  /** Runs of this host whose process is gone: their claims are taken over without waiting for the lease. */
  private readonly dead = new Set<number>();
  protected readonly heartbeat: Heartbeat;
  private listener: pg.Client | null = null;
  private listening: Promise<void> | null = null;
  private readonly waiters = new Map<string, Set<() => void>>();
  /** Group commits sent: two round trips each (one for lookups alone). */
  commits = 0;

  private constructor(
    private readonly store: RecordsHost,
    service: string,
    serviceId: number,
    run: number | null,
    policyNow: number,
    private writer: pg.Client,
  ) {
    super(service, serviceId, run, policyNow);
    this.storeId = store.storeId;
    this.named = store.keepsSession;
    this.group = new GroupCommit((batch) => this.commitBatch(batch), (error) => this.writeError(error), TIMING);
    // Nothing more is written once the lease cannot be renewed: the run ends on that failure, as on a commit's.
    const beat =
      run === null
        ? null
        : async () => {
            const sent = Date.now();
            const { rows } = await this.store.db.query<{ at: number }>(`UPDATE runs SET heartbeat_at = ${NOW_MS} WHERE id = $1 RETURNING heartbeat_at AS at`, [run]);
            this.store.clock?.observe(Number(rows[0]?.at), sent, Date.now());
          };
    this.heartbeat = new Heartbeat(beat, LEASE_MS, { now: store.hostNow }, (error) => this.group.fail(error));
  }

  /** Opens the records of `service`, writing on `writer` or on a connection made now (a caller with statements to send first makes it meanwhile: three round trips). */
  static async open(store: RecordsHost, service: string, serviceId: number, run: number | null, policyNow: number, writer?: Promise<pg.Client>): Promise<PgRecords> {
    const records = new PgRecords(store, service, serviceId, run, policyNow, await (writer ?? PgRecords.connectWriter(store)));
    records.heartbeat.start();
    return records;
  }

  /** The connection a run's records write on (openWriter); a caller that does not open the records with it must end it. */
  static connectWriter(store: RecordsHost): Promise<pg.Client> {
    const connecting = openWriter(store, connect);
    // Awaited by open; until then a failure must not go unhandled.
    connecting.catch(() => {});
    return connecting;
  }

  private get where(): string {
    const { host, port } = placeOf(this.writer);
    return `${host}:${port}`;
  }

  protected async rows(text: string, params: readonly unknown[]): Promise<unknown[][]> {
    return (await this.store.db.query(text, [...params])).rows.map((r) => Object.values(r));
  }

  protected among(column: string, n: number, list: readonly (string | number)[], type: 'text' | 'bigint'): [string, unknown] {
    return [`${column} = ANY($${n}::${type}[])`, [...list]];
  }

  protected storeNow(): number {
    return this.store.now();
  }

  async loadLookups(domains: readonly string[], indexOf: (domain: string) => number | undefined, visit: (index: number, lookup: Lookup) => void): Promise<void> {
    for (const part of chunks(domains)) {
      const { rows } = await this.store.db.query<{ domain: string; status: string; company: string | null; name: string | null; checked_at: number }>(
        'SELECT domain, status, company, name, checked_at FROM lookups WHERE service = $1 AND domain = any($2::text[])',
        [this.serviceId, part],
      );
      for (const r of rows) {
        const i = indexOf(r.domain);
        if (i === undefined || (r.status !== 'hit' && r.status !== 'miss') || (r.status === 'hit' && typeof r.company !== 'string')) continue;
        visit(i, { status: r.status, company: r.company, name: r.name, checkedAt: Number(r.checked_at) });
      }
    }
  }

  /** What is held of each company and its latest purchase, in one statement: one moment of the store. */
  async loadCompanies(companies: readonly string[], visit: (domain: string, state: CompanyState) => void): Promise<void> {
    for (const part of chunks([...new Set(companies)])) {
      const { rows } = await this.store.db.query<Record<string, unknown>>(
        `SELECT d.domain, c.name, c.bought_at, c.last_updated, c.generation AS c_generation, c.credits,
                p.generation, p.key_version, p.intent_key, p.uncertain, p.unconfirmed, p.error_code, p.outcome, p.closed_at, p.lost_at, p.settle_ms
           FROM unnest($2::text[]) AS d(domain)
           LEFT JOIN companies c ON c.service = $1 AND c.domain = d.domain
           LEFT JOIN LATERAL (SELECT * FROM purchases q WHERE q.service = $1 AND q.domain = d.domain ORDER BY q.generation DESC LIMIT 1) p ON true
          WHERE c.domain IS NOT NULL OR p.domain IS NOT NULL`,
        [this.serviceId, part],
      );
      for (const r of rows) visit(r['domain'] as string, stateOf(r));
    }
  }

  /** Companies asked for one at a time (each first met mid-run), waiting for the next read. */
  private wanted = new Map<string, { resolve: (s: CompanyState) => void; reject: (e: unknown) => void }[]>();
  private reading: Promise<void> | null = null;

  /** One company's state, read together with all asked while the previous read was out: a round trip each would cap a run at ~50 companies/s at 20 ms from the server. */
  companyState(company: string): Promise<CompanyState> {
    return new Promise((resolve, reject) => {
      const list = this.wanted.get(company) ?? [];
      list.push({ resolve, reject });
      this.wanted.set(company, list);
      this.reading ??= this.readStates();
    });
  }

  private async readStates(): Promise<void> {
    await new Promise((resolve) => setImmediate(resolve));
    while (this.wanted.size > 0) {
      const wanted = this.wanted;
      this.wanted = new Map();
      const found = new Map<string, CompanyState>();
      try {
        await this.loadCompanies([...wanted.keys()], (domain, state) => found.set(domain, state));
        for (const [domain, waiting] of wanted) for (const w of waiting) w.resolve(found.get(domain) ?? { held: null, purchase: null });
      } catch (error) {
        for (const waiting of wanted.values()) for (const w of waiting) w.reject(error);
      }
    }
    this.reading = null;
  }

  async records(companies: readonly string[]): Promise<Map<string, CompanyRecord>> {
    const found = new Map<string, CompanyRecord>();
    for (const part of chunks(companies)) {
      const { rows } = await this.store.db.query<{ domain: string; record: string }>('SELECT domain, record FROM companies WHERE service = $1 AND domain = any($2::text[])', [this.serviceId, part]);
      for (const r of rows) {
        const record = parseRecord(r.record);
        if (record !== null) found.set(r.domain, record);
      }
    }
    return found;
  }

  /** Writes events of the past (an imported journal), each at its own time as the SQLite store does, a chunk a transaction. */
  async importEvents(events: JournalEvents): Promise<void> {
    await this.flush();
    for (let at = 0; at < events.length; at += IMPORT_CHUNK) {
      const part = events.slice(at, at + IMPORT_CHUNK);
      try {
        await this.commit(() => new BatchPlan(this.serviceId, this.run, this.store.host, part.map((e) => e.event), part.map((e) => e.at), [...this.dead], null, this.store.now()));
      } catch (error) {
        throw this.writeError(error);
      }
      this.commits++;
      this.statistics.written(part.filter((e) => e.event.type !== 'match').length);
    }
  }

  /** A write the store refused, or could not be reached for, as one line with its exit (PgWriteError). */
  private writeError(error: unknown): PgWriteError {
    const { reconnectMs, queryTimeoutMs } = this.store;
    return new PgWriteError(this.where, error, reconnectMs, lockWait(BATCH_LOCK_WAIT_MS, queryTimeoutMs), queryTimeoutMs);
  }

  /** One batch: a claim per event, or AGAIN for a claim held by a process of this host that is gone. */
  private async commitBatch(batch: readonly Queued[]): Promise<(Claim | typeof AGAIN)[]> {
    const events = batch.map((p) => p.event);
    const claimed = await this.commit(() => new BatchPlan(this.serviceId, this.run, this.store.host, events, this.store.now(), [...this.dead], this.storeId));
    this.commits++;
    this.statistics.written(batch.filter((p) => p.event.type !== 'match').length);
    return claimed.map((c) => {
      if (c.holder === undefined || !this.goneHere(c.holder)) return c.claim;
      // The holder is a process of this host that is gone: claim again, taking it over now.
      this.dead.add(c.holder.run);
      return AGAIN;
    });
  }

  private writerLost = false;
  /** Whether batches prepare their alike statements by name: not behind a pooler that loses them. */
  private named: boolean;
  private readonly statistics = new Statistics(
    (text) => this.store.db.query(text),
    async (text) => {
      const c = client(this.store.url, false, this.store.queryTimeoutMs);
      c.on('error', () => {});
      this.analyzing = c;
      try {
        await c.connect();
        await c.query(text);
      } finally {
        this.analyzing = null;
        await c.end().catch(() => {});
      }
    },
  );
  /** The analyze's own connection while it runs: ended, not waited for, when the store is out of reach. */
  private analyzing: pg.Client | null = null;

  /**
   * One group commit, resent on a new connection if the connection is lost (up to the reconnect budget). Resending is safe whether or not
   * the first COMMIT landed: every batch statement is idempotent (writer.ts). Meanwhile nothing is written, so no new paid call starts.
   * Each send is planned at the store's time then, so a batch resent after the month turned judges the new month's caps.
   */
  private async commit(planned: () => BatchPlan): Promise<Claimed[]> {
    let sent = 0;
    const claimed = await reconnecting(async () => {
      sent++;
      const plan = planned();
      for (let renewed = false; ; renewed = true) {
        if (this.writerLost) {
          // Connected as is: a failure is the server's own error, which `reconnecting` judges.
          const fresh = await openWriter(this.store, (c) => c.connect());
          void this.writer.end().catch(() => {});
          this.writer = fresh;
          this.writerLost = false;
        }
        try {
          return await commitBatch(this.writer, plan, lockWait(BATCH_LOCK_WAIT_MS, this.store.queryTimeoutMs), this.named);
        } catch (error) {
          if (isConnectionLoss(error)) this.writerLost = true;
          // Prepared statements not what this connection took them for (a pooler's other session, a changed plan): the batch
          // was rolled back, and is resent on a new connection, unnamed from now on.
          else if (!renewed && PREPARED_GONE.has(String((error as { code?: unknown }).code))) {
            this.writerLost = true;
            this.named = false;
            continue;
          }
          throw error;
        }
      }
    }, this.store.reconnectMs);
    // Resent: the first send may have landed and taken over another run's purchase, so every claim is answered as a takeover:
    // its key counts as possibly charged, which costs at most a wait, never a credit.
    return sent === 1 ? claimed : claimed.map((c) => (c.claim.kind === 'ok' ? { ...c, claim: { ...c.claim, tookOver: true } } : c));
  }

  /**
   * A run of this host and boot whose process is gone. A pid that may be reused (a process started after the run) is left to the lease:
   * a clock set forward makes the run's own process look the same, and a live run must never be taken for gone.
   */
  private goneHere(holder: NonNullable<Claimed['holder']>): boolean {
    if (holder.host !== this.store.host || holder.boot === null || holder.boot !== this.store.boot || this.dead.has(holder.run)) return false;
    return !isProcessAlive(holder.pid);
  }

  /** Resolves when another run's outcome (or release) for `company` commits, or after `ms` (polling: a notification sent while the listener reconnects is lost). */
  async waitForOutcome(company: string, ms: number, signal?: AbortSignal): Promise<'notified' | 'timeout'> {
    // Behind a pooler in transaction mode a LISTEN would stay on a session others are handed: polling alone.
    if (this.store.keepsSession) await this.listen().catch(() => {});
    const key = notice(this.serviceId, company);
    return new Promise((resolve) => {
      const set = this.waiters.get(key) ?? new Set<() => void>();
      this.waiters.set(key, set);
      const done = (how: 'notified' | 'timeout'): void => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        set.delete(wake);
        if (set.size === 0) this.waiters.delete(key);
        resolve(how);
      };
      const wake = (): void => done('notified');
      const onAbort = (): void => done('timeout');
      const timer = setTimeout(() => done('timeout'), ms);
      signal?.addEventListener('abort', onAbort);
      set.add(wake);
    });
  }

  private listen(): Promise<void> {
    this.listening ??= (async () => {
      const c = client(this.store.url, false, this.store.queryTimeoutMs);
      c.on('notification', (n) => {
        for (const wake of [...(this.waiters.get(n.payload ?? '') ?? [])]) wake();
      });
      c.on('error', () => {
        // Lost: the next wait connects again; waiters meanwhile fall back on polling.
        this.listener = null;
        this.listening = null;
        void c.end().catch(() => {});
      });
      await connect(c);
      await c.query(`LISTEN ${OUTCOME_CHANNEL}`);
      this.listener = c;
    })().catch((error: unknown) => {
      this.listening = null;
      throw error;
    });
    return this.listening;
  }

  /**
   * Lets go of every claim this run still holds, so others take over now rather than after the lease; one held by another session is left
   * to the lease. Also after a lock timeout (the store is there), but not after another write failure.
   */
  async releaseClaims(): Promise<void> {
    this.heartbeat.stop();
    const failure = this.group.failure;
    if (this.run === null || (failure !== null && !(failure instanceof PgWriteError && isLockTimeout(failure.cause)))) return;
    const db = this.store.db;
    try {
      // Only purchases whose company lock it gets at once, as every purchase write takes it: another run's batch holding one writes it
      // whole, and the claim goes when this run's end is recorded. SKIP LOCKED passes held rows; a table lock is waited for briefly.
      await inTransaction(
        db,
        () =>
          db.query(
            `WITH mine AS (SELECT service, domain, generation FROM purchases WHERE owner_run = $1 FOR UPDATE SKIP LOCKED),
             free AS (SELECT m.* FROM mine m WHERE pg_try_advisory_xact_lock(hashtextextended(m.service::text || ':' || m.domain, 0))),
             freed AS (UPDATE purchases p SET owner_run = NULL FROM free m
                        WHERE p.service = m.service AND p.domain = m.domain AND p.generation = m.generation RETURNING p.service, p.domain)
             SELECT count(pg_notify($2, service::text || ':' || domain)) FROM freed`,
            [this.run, OUTCOME_CHANNEL],
          ),
        RELEASE_WAIT_MS,
      );
    } catch (error) {
      if (!isLockTimeout(error)) throw error;
    }
  }

  async endRun(end: RunEnd): Promise<void> {
    this.heartbeat.stop();
    if (this.run === null) return;
    // Out of reach past the budget: a second wait would only delay the exit; the run's row is left to lapse, as a dead run's does.
    if (this.group.failure instanceof PgWriteError && this.group.failure.lost) return;
    await this.store.db.query('UPDATE runs SET ended_at = $1, status = $2, credits = $3, bought = $4, reused = $5 WHERE id = $6', [this.store.now(), end.status, end.credits, end.bought, end.reused, this.run]);
  }

  async close(): Promise<void> {
    try {
      await this.flush();
    } finally {
      await this.disconnect();
    }
  }

  /** Ends this run's connections (the writer's and the listener's); the store's stays. */
  async disconnect(): Promise<void> {
    this.heartbeat.stop();
    // A look or an analyze under way is waited for, but not once the store is out of reach: no second wait on the way out.
    if (this.group.failure === null) await this.statistics.stop();
    else {
      void this.statistics.stop();
      void this.analyzing?.end().catch(() => {});
    }
    const listener = this.listener;
    this.listener = null;
    this.listening = null;
    await Promise.all([this.writer.end().catch(() => {}), listener?.end().catch(() => {})]);
  }
}

export { OK };

/** A connection for a run's writes: pipelined; each batch bounds its own lock waits (commitBatch). */
async function openWriter(store: RecordsHost, connectWith: (c: pg.Client) => Promise<unknown>): Promise<pg.Client> {
  const writer = client(store.url, true, store.queryTimeoutMs);
  // A connection dropped under a batch rejects its queries; this keeps the process up meanwhile.
  writer.on('error', () => {});
  await connectWith(writer);
  return writer;
}

function stateOf(r: Record<string, unknown>): CompanyState {
  const n = (k: string): number | null => (r[k] === null || r[k] === undefined ? null : Number(r[k]));
  return {
    held:
      r['name'] === null
        ? null
        : {
            domain: r['domain'] as string,
            name: r['name'] as string,
            boughtAt: n('bought_at') as number,
            lastUpdated: (r['last_updated'] as string | null) ?? null,
            generation: n('c_generation') as number,
            credits: n('credits') as number,
          },
    purchase:
      r['generation'] === null
        ? null
        : {
            domain: r['domain'] as string,
            generation: n('generation') as number,
            keyVersion: n('key_version') as number,
            intentKey: (r['intent_key'] as string | null) ?? null,
            uncertain: n('uncertain') === 1,
            unconfirmed: n('unconfirmed') ?? 0,
            errorCode: (r['error_code'] as string | null) ?? null,
            outcome: r['outcome'] as 'open' | 'hit' | 'miss' | 'failed',
            closedAt: n('closed_at'),
            lostAt: n('lost_at'),
            settleMs: n('settle_ms'),
          },
  };
}
