import type { CompanyRecord } from '../api/types.js';
import { LEASE_MS, StoreWriteError, type Store } from './sqlite.js';
import type { Claim, EnrichEvent, HeldCompany, IntentEvent, Lookup, Purchase, RunEnd, ServiceStore, StoreEvent } from './types.js';

interface Pending {
  event: StoreEvent;
  durable: boolean;
  resolve: (claim: Claim) => void;
  reject: (error: Error) => void;
}

const OK: Claim = { kind: 'ok' };
/** Outcomes gather this long (or this many) before a commit; intents never wait for it. */
const BATCH_MS = 20;
const BATCH_ROWS = 2_000;
/** Intents wait this long for others to share their commit and its fsync (a paid call waits on it). */
const INTENT_GATHER_MS = 1;
/** Lookups per INSERT statement (6 parameters each, well under SQLite's limit of 32,766). */
const LOOKUP_ROWS = 200;
/** How often a run says it is alive (its lease, in sqlite.ts, is a few of these). */
const HEARTBEAT_MS = 10_000;

type PurchaseRow = [string, number, number, string | null, number, string | null, string | null, Purchase['outcome'], number | null, number | null, number | null];
type CompanyRow = [string, string, number, string | null, number, number];
const PURCHASE_COLUMNS = 'domain, generation, key_version, intent_key, uncertain, error_ids, error_code, outcome, closed_at, owner_run, lost_at';
const COMPANY_COLUMNS = 'domain, name, bought_at, last_updated, generation, credits';

function toPurchase(r: PurchaseRow): Purchase {
  let errorIds: string[] = [];
  try {
    const parsed: unknown = r[5] === null ? [] : JSON.parse(r[5]);
    if (Array.isArray(parsed)) errorIds = parsed.filter((x): x is string => typeof x === 'string');
  } catch {
    // a damaged list only forgets which errors were replays: the key stays kept, which is safe
  }
  return {
    domain: r[0],
    generation: Number(r[1]),
    keyVersion: Number(r[2]),
    intentKey: typeof r[3] === 'string' ? r[3] : null,
    uncertain: r[4] === 1,
    errorIds,
    errorCode: r[6],
    outcome: r[7],
    closedAt: r[8],
    lostAt: r[10] === null ? null : Number(r[10]),
  };
}

const toHeld = (r: CompanyRow): HeldCompany => ({
  domain: r[0],
  name: r[1],
  boughtAt: Number(r[2]),
  lastUpdated: r[3],
  generation: Number(r[4]),
  credits: Number(r[5]),
});

/** Validates a record read back: a tampered or damaged row is treated as not held. */
function parseRecord(text: string): CompanyRecord | null {
  try {
    const v = JSON.parse(text) as unknown;
    if (v === null || typeof v !== 'object' || Array.isArray(v)) return null;
    const r = v as Record<string, unknown>;
    if (typeof r['domain'] !== 'string' || typeof r['name'] !== 'string') return null;
    if (!Array.isArray(r['specialties'])) r['specialties'] = [];
    return r as unknown as CompanyRecord;
  } catch {
    return null;
  }
}

/**
 * One service's records, and this run's writes to them. Writes are group-committed: every event
 * queued in one turn of the event loop goes in one transaction, synced to disk (synchronous=FULL)
 * only when one of them must be durable (an intent), so durability does not cap throughput.
 */
export class ServiceRecords implements ServiceStore {
  readonly storeId: string;
  private queue: Pending[] = [];
  private draining: Promise<void> | null = null;
  private failure: StoreWriteError | null = null;
  private heartbeat: NodeJS.Timeout | null = null;
  /** Sends the batch being gathered at once (an intent arrived, or flush was asked). */
  private hurry: ((delayMs: number) => void) | null = null;
  private readonly now: () => number;
  /** Transactions that synced to disk: one per batch holding an intent, not one per intent. */
  syncs = 0;

  constructor(
    private readonly store: Store,
    readonly service: string,
    private readonly serviceId: number,
    private readonly run: number | null,
    /** The moment this run judges freshness at (Store.policyNow): a resumed job keeps its own. */
    readonly policyNow: number = Date.now(),
  ) {
    this.storeId = store.storeId;
    this.now = store.options.now;
  }

  /**
   * Whether the store held any company or purchase of this service when asked: if not, a company
   * first met in a match needs no look-up (one bought meanwhile by another run is caught by the
   * claim, which always looks).
   */
  holdsAny(): boolean {
    const row = this.store.sql('SELECT EXISTS (SELECT 1 FROM companies WHERE service = ?) OR EXISTS (SELECT 1 FROM purchases WHERE service = ?)').raw(true).get(this.serviceId, this.serviceId) as [number];
    return row[0] === 1;
  }

  get runId(): number {
    return this.run ?? 0;
  }

  private get db(): Store['db'] {
    return this.store.db;
  }

  // ---- reads ----

  /**
   * Point queries for a few keys, one scan of the service's rows for many: past about an eighth
   * of the table a sequential scan beats an index probe per key.
   */
  private visit<R extends unknown[]>(keys: readonly string[], table: string, columns: string, has: (domain: string) => boolean, each: (row: R) => void): void {
    if (keys.length === 0) return;
    const count = (this.store.sql(`SELECT count(*) FROM ${table} WHERE service = ?`).raw(true).get(this.serviceId) as [number])[0];
    if (count === 0) return;
    if (keys.length * 8 > count) {
      for (const row of this.store.sql(`SELECT ${columns} FROM ${table} WHERE service = ?`).raw(true).iterate(this.serviceId)) {
        if (has((row as R)[0] as string)) each(row as R);
      }
      return;
    }
    const point = this.store.sql(`SELECT ${columns} FROM ${table} WHERE service = ? AND domain = ?`).raw(true);
    for (const key of keys) for (const row of point.all(this.serviceId, key)) each(row as R);
  }

  forEachLookup(domains: readonly string[], indexOf: (domain: string) => number | undefined, visit: (index: number, lookup: Lookup) => void): void {
    this.visit<[string, string, string | null, string | null, number]>(
      domains,
      'lookups',
      'domain, status, company, name, checked_at',
      (d) => indexOf(d) !== undefined,
      ([domain, status, company, name, checkedAt]) => {
        const i = indexOf(domain);
        if (i === undefined || (status !== 'hit' && status !== 'miss') || (status === 'hit' && typeof company !== 'string')) return;
        visit(i, { status, company, name, checkedAt: Number(checkedAt) });
      },
    );
  }

  forEachCompany(companies: readonly string[], visit: (domain: string, held: HeldCompany | null, purchase: Purchase | null) => void): void {
    const wanted = new Set(companies);
    const held = new Map<string, HeldCompany>();
    const latest = new Map<string, Purchase>();
    this.visit<CompanyRow>(companies, 'companies', COMPANY_COLUMNS, (d) => wanted.has(d), (r) => held.set(r[0], toHeld(r)));
    this.visit<PurchaseRow>(companies, 'purchases', PURCHASE_COLUMNS, (d) => wanted.has(d), (r) => {
      const p = toPurchase(r);
      const prev = latest.get(p.domain);
      if (prev === undefined || p.generation > prev.generation) latest.set(p.domain, p);
    });
    for (const domain of companies) {
      const h = held.get(domain) ?? null;
      const p = latest.get(domain) ?? null;
      if (h !== null || p !== null) visit(domain, h, p);
    }
  }

  record(company: string): CompanyRecord | null {
    const row = this.store.sql('SELECT record FROM companies WHERE service = ? AND domain = ?').raw(true).get(this.serviceId, company) as [string] | undefined;
    return row === undefined ? null : parseRecord(row[0]);
  }

  held(company: string): HeldCompany | null {
    const row = this.store.sql(`SELECT ${COMPANY_COLUMNS} FROM companies WHERE service = ? AND domain = ?`).raw(true).get(this.serviceId, company) as CompanyRow | undefined;
    return row === undefined ? null : toHeld(row);
  }

  latestPurchase(company: string): Purchase | null {
    const row = this.store.sql(`SELECT ${PURCHASE_COLUMNS} FROM purchases WHERE service = ? AND domain = ? ORDER BY generation DESC LIMIT 1`)
      .raw(true)
      .get(this.serviceId, company) as PurchaseRow | undefined;
    return row === undefined ? null : toPurchase(row);
  }

  // ---- writes ----

  append(event: StoreEvent, durable = false): Promise<Claim> {
    if (this.failure !== null) {
      const failed = Promise.reject(this.failure);
      // Outcomes are not awaited: the failure surfaces on the next intent and on flush.
      failed.catch(() => {});
      return failed;
    }
    const written = new Promise<Claim>((resolve, reject) => this.queue.push({ event, durable, resolve, reject }));
    // Callers need not wait on non-durable events; a failure still surfaces on flush.
    written.catch(() => {});
    if (durable || this.queue.length >= BATCH_ROWS) this.hurry?.(durable ? INTENT_GATHER_MS : 0);
    this.draining ??= this.drain(durable);
    return written;
  }

  async flush(): Promise<void> {
    this.hurry?.(0);
    if (this.draining !== null) await this.draining;
    if (this.failure !== null) throw this.failure;
  }

  /**
   * When the next batch goes: an intent waits a millisecond for others to share its commit and
   * fsync (the paid call waits on it); outcomes and lookups wait a little longer, so a commit
   * carries hundreds of them rather than one (a commit costs far more than a row).
   */
  private nextBatch(urgent: boolean): Promise<void> {
    return new Promise<void>((resolve) => {
      let timer = setTimeout(go, urgent ? INTENT_GATHER_MS : BATCH_MS);
      function go(): void {
        clearTimeout(timer);
        resolve();
      }
      this.hurry = (delayMs) => {
        this.hurry = null;
        clearTimeout(timer);
        timer = setTimeout(go, delayMs);
      };
    });
  }

  private async drain(urgent: boolean): Promise<void> {
    await this.nextBatch(urgent);
    this.hurry = null;
    while (this.queue.length > 0 && this.failure === null) {
      const batch = this.queue;
      this.queue = [];
      const claims: Claim[] = [];
      try {
        const durable = batch.some((p) => p.durable);
        // WAL with synchronous=NORMAL survives a crash of this process (the OS holds the
        // write); only an intent needs to survive a power loss too, so only its batch syncs.
        this.setSynchronous(durable ? 'FULL' : 'NORMAL');
        this.db.exec('BEGIN IMMEDIATE');
        try {
          // Lookups are most of a big run's rows: they go in many to a statement.
          this.insertLookups(batch);
          for (const p of batch) claims.push(p.event.t === 'match' ? OK : this.apply(p.event));
          this.db.exec('COMMIT');
        } catch (error) {
          if (this.db.inTransaction) this.db.exec('ROLLBACK');
          throw error;
        }
        if (durable) this.syncs++;
        batch.forEach((p, i) => p.resolve(claims[i] ?? OK));
      } catch (error) {
        this.failure = new StoreWriteError(this.store.path, error);
        for (const p of [...batch, ...this.queue]) p.reject(this.failure);
        this.queue = [];
      }
    }
    this.draining = null;
  }

  private synchronous: 'FULL' | 'NORMAL' | null = null;

  private setSynchronous(mode: 'FULL' | 'NORMAL'): void {
    if (this.synchronous === mode) return;
    this.db.pragma(`synchronous = ${mode}`);
    this.synchronous = mode;
  }

  private insertLookups(batch: readonly Pending[]): void {
    const rows: unknown[] = [];
    const now = this.now();
    for (const { event } of batch) {
      if (event.t !== 'match' || event.s === 'error') continue;
      rows.push(this.serviceId, event.d, event.s, event.c ?? null, event.n ?? null, now);
    }
    for (let at = 0; at < rows.length; at += LOOKUP_ROWS * 6) {
      const chunk = rows.slice(at, at + LOOKUP_ROWS * 6);
      const n = chunk.length / 6;
      this.store.sql(`INSERT OR REPLACE INTO lookups (service, domain, status, company, name, checked_at) VALUES ${'(?, ?, ?, ?, ?, ?), '.repeat(n - 1)}(?, ?, ?, ?, ?, ?)`).run(...chunk);
    }
  }

  /** Writes events of the past (an imported journal) in one transaction, each at its own time. */
  importEvents(events: readonly { event: StoreEvent; at: number }[]): void {
    this.db.transaction(() => {
      for (const { event, at } of events) this.apply(event, at);
    })();
  }

  private apply(event: StoreEvent, now = this.now()): Claim {
    switch (event.t) {
      case 'match':
        if (event.s === 'error') return OK;
        this.store
          .sql('INSERT OR REPLACE INTO lookups (service, domain, status, company, name, checked_at) VALUES (?, ?, ?, ?, ?, ?)')
          .run(this.serviceId, event.d, event.s, event.c ?? null, event.n ?? null, now);
        return OK;
      case 'intent':
        return this.claim(event, now);
      case 'enrich':
        this.applyEnrich(event, now);
        return OK;
      case 'unclaim':
        this.store
          .sql(
            `UPDATE purchases SET intent_key = NULL, owner_run = NULL, lost_at = NULL
             WHERE service = ? AND domain = ? AND generation = ? AND key_version = ? AND intent_key = ? AND outcome = 'open' AND uncertain = 0`,
          )
          .run(this.serviceId, event.c, event.g, event.v, event.key);
        return OK;
    }
  }

  /** Whether the run that owns an open intent may still be sending under it. */
  private runAlive(run: number): boolean {
    return run === this.run || this.store.runAlive(run);
  }

  /**
   * The intent, written only if this run may buy: no other live run holds the purchase open, and
   * no run has bought this generation since the plan was made. A purchase another run moved on
   * since this one read it (a new key version, an outcome) is handed back for the caller to adopt.
   */
  private claim(event: IntentEvent, now: number): Claim {
    const held = this.held(event.c);
    if (held !== null && held.generation >= event.g) return { kind: 'held', held };
    const row = this.store.sql(`SELECT ${PURCHASE_COLUMNS} FROM purchases WHERE service = ? AND domain = ? AND generation = ?`)
      .raw(true)
      .get(this.serviceId, event.c, event.g) as PurchaseRow | undefined;
    let tookOver = false;
    if (row !== undefined) {
      const owner = row[9];
      if (row[7] === 'open' && owner !== null && owner !== this.run && this.runAlive(owner)) return { kind: 'busy' };
      tookOver = row[3] !== null && owner !== this.run;
      const current = toPurchase(row);
      if (current.outcome !== 'open' || current.keyVersion !== event.v || (current.intentKey !== null && current.intentKey !== event.key)) {
        return { kind: 'moved', purchase: current };
      }
    }
    this.store.sql(
        `INSERT INTO purchases (service, domain, generation, key_version, intent_key, outcome, owner_run, opened_at, lost_at)
         VALUES (?, ?, ?, ?, ?, 'open', ?, ?, ?)
         ON CONFLICT (service, domain, generation) DO UPDATE SET
           key_version = excluded.key_version, intent_key = excluded.intent_key, outcome = 'open', owner_run = excluded.owner_run,
           lost_at = max(coalesce(lost_at, 0), excluded.lost_at)`,
      )
      .run(this.serviceId, event.c, event.g, event.v, event.key, this.run, now, event.at ?? now);
    return tookOver ? { kind: 'ok', tookOver } : OK;
  }

  private ensurePurchase(e: EnrichEvent, now: number): void {
    this.store
      .sql(`INSERT OR IGNORE INTO purchases (service, domain, generation, key_version, outcome, opened_at) VALUES (?, ?, ?, ?, 'open', ?)`)
      .run(this.serviceId, e.c, e.g, e.v, now);
  }

  private applyEnrich(e: EnrichEvent, now: number): void {
    if (e.at !== undefined) now = e.at;
    const charged = e.charged ?? 0;
    const where = 'WHERE service = ? AND domain = ? AND generation = ?';
    // A live run always wrote the intent first; an imported journal may have none.
    if (this.run === null) this.ensurePurchase(e, now);
    const id = [this.serviceId, e.c, e.g] as const;
    if (e.s === 'hit' && e.company !== undefined) {
      this.store.sql(
          `INSERT INTO companies (service, domain, name, record, bought_at, last_updated, idempotency_key, credits, generation, run)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
           ON CONFLICT (service, domain) DO UPDATE SET name = excluded.name, record = excluded.record, bought_at = excluded.bought_at,
             last_updated = excluded.last_updated, idempotency_key = excluded.idempotency_key, credits = excluded.credits,
             generation = excluded.generation, run = excluded.run
           WHERE excluded.generation >= companies.generation`,
        )
        .run(this.serviceId, e.c, e.company.name, JSON.stringify(e.company), now, e.company.last_updated || null, e.key_used ?? null, charged, e.g, this.run);
    }
    if (e.s === 'hit' || e.s === 'miss') {
      this.store.sql(`UPDATE purchases SET outcome = ?, intent_key = NULL, owner_run = NULL, credits = credits + ?, run = ?, closed_at = ?, error_code = NULL ${where}`)
        .run(e.s, charged, this.run, now, ...id);
      return;
    }
    if (e.final === true) {
      this.store.sql(`UPDATE purchases SET outcome = 'failed', intent_key = NULL, owner_run = NULL, error_code = ?, run = ?, closed_at = ? ${where}`).run(e.code ?? 'error', this.run, now, ...id);
    } else if (e.key === 'retired') {
      // Proven uncharged: a service that stored this error under the key would replay it forever.
      this.store.sql(`UPDATE purchases SET key_version = ?, intent_key = NULL, uncertain = 0, error_ids = NULL, lost_at = NULL, error_code = ? ${where}`)
        .run(e.v + 1, e.code ?? 'error', ...id);
    } else {
      const row = this.store.sql(`SELECT error_ids FROM purchases ${where}`).raw(true).get(...id) as [string | null] | undefined;
      let ids: string[] = [];
      try {
        ids = row?.[0] == null ? [] : (JSON.parse(row[0]) as string[]);
      } catch {
        ids = [];
      }
      if (e.rid !== undefined && !ids.includes(e.rid)) ids.push(e.rid);
      this.store
        .sql(`UPDATE purchases SET uncertain = 1, error_ids = ?, error_code = ?, lost_at = CASE WHEN ? THEN ? ELSE lost_at END ${where}`)
        .run(JSON.stringify(ids.slice(-50)), e.code ?? 'error', e.lost === true ? 1 : 0, now, ...id);
    }
  }

  /** Says every few seconds that this run is alive, so others wait for its claims and no longer. */
  startHeartbeat(): void {
    if (this.run === null || this.heartbeat !== null) return;
    this.lastBeat = this.now();
    this.heartbeat = setInterval(() => this.beat(), HEARTBEAT_MS);
    this.heartbeat.unref();
  }

  private lastBeat = 0;

  private beat(): void {
    if (this.run === null) return;
    try {
      this.store.sql('UPDATE runs SET heartbeat_at = ? WHERE id = ?').run(this.now(), this.run);
      this.lastBeat = this.now();
    } catch {
      // busy or failing: the next beat tries again, and a lease that lapses only costs a wait
    }
  }

  /**
   * Whether this run went so long without a heartbeat (a paused process, a stalled loop) that a
   * run on another host may have taken its claims over: then it must claim again before it sends.
   */
  leaseLapsed(): boolean {
    if (this.run === null || this.now() - this.lastBeat <= LEASE_MS - HEARTBEAT_MS) return false;
    this.beat();
    return true;
  }

  private stopHeartbeat(): void {
    if (this.heartbeat !== null) clearInterval(this.heartbeat);
    this.heartbeat = null;
  }

  releaseClaims(): void {
    this.stopHeartbeat();
    if (this.run === null || this.failure !== null) return;
    this.store.sql('UPDATE purchases SET owner_run = NULL WHERE owner_run = ?').run(this.run);
  }

  endRun(end: RunEnd): void {
    this.stopHeartbeat();
    if (this.run === null) return;
    this.store.sql('UPDATE runs SET ended_at = ?, status = ?, credits = ?, bought = ?, reused = ? WHERE id = ?')
      .run(this.now(), end.status, end.credits, end.bought, end.reused, this.run);
  }
}
