import type { Connection } from './connection.js';
import { capRow, monthOf, runBudgetSql, type CapRow } from '../budget.js';
import { decideBatch, type BatchDecision, type BatchReader, type KeptPurchase, type RecordWrite } from '../purchase.js';
import type { Claim, HeldCompany, MatchEvent, Purchase, StoreEvent } from '../types.js';

/** The caps that apply to a run (the store's, its person's) with what each has spent and held: since, until, run. */
const BUDGET_ROOM = runBudgetSql(() => '?');

/** One queued write, and whether the caller needs it on disk before going on (an intent). */
export interface WriteItem {
  event: StoreEvent;
  durable: boolean;
}

/** The claim of an event that claims nothing (all but intents), and of an intent this run may buy under. */
export const OK: Claim = { kind: 'ok' };
/** Lookups per INSERT statement, largest first (6 parameters each, well under SQLite's limit of 32,766). */
const LOOKUP_ROWS = [200, 50, 10, 1];
const lookupInsert = (n: number): string =>
  `INSERT OR REPLACE INTO lookups (service, domain, status, company, name, checked_at) VALUES ${'(?, ?, ?, ?, ?, ?), '.repeat(n - 1)}(?, ?, ?, ?, ?, ?)`;

/** A purchase row with who holds it and what it cost (store/purchase.ts KeptPurchase). */
type KeptRow = [...PurchaseRow, number, number | null, number, string | null, number, number];
const KEPT_COLUMNS = 'domain, generation, key_version, intent_key, uncertain, unconfirmed, error_code, outcome, closed_at, owner_run, lost_at, settle_ms, credits, run, opened_at, person, reserved, resumed';

function toKept(r: KeptRow): KeptPurchase {
  const p = toPurchase(r.slice(0, 12) as PurchaseRow);
  // Field by field, not a spread and four more: V8 builds that shape slowly, and this runs per claim and outcome.
  return {
    domain: p.domain,
    generation: p.generation,
    keyVersion: p.keyVersion,
    intentKey: p.intentKey,
    uncertain: p.uncertain,
    unconfirmed: p.unconfirmed,
    errorCode: p.errorCode,
    outcome: p.outcome,
    closedAt: p.closedAt,
    lostAt: p.lostAt,
    settleMs: p.settleMs,
    ownerRun: r[9] === null ? null : Number(r[9]),
    credits: Number(r[12]),
    run: r[13] === null ? null : Number(r[13]),
    openedAt: Number(r[14]),
    person: r[15],
    reserved: Number(r[16] ?? 0),
    resumed: r[17] === 1,
  };
}

export type PurchaseRow = [string, number, number, string | null, number, number, string | null, Purchase['outcome'], number | null, number | null, number | null, number | null];
export type CompanyRow = [string, string, number, string | null, number, number];
export const PURCHASE_COLUMNS = 'domain, generation, key_version, intent_key, uncertain, unconfirmed, error_code, outcome, closed_at, owner_run, lost_at, settle_ms';
export const COMPANY_COLUMNS = 'domain, name, bought_at, last_updated, generation, credits';

export function toPurchase(r: PurchaseRow): Purchase {
  return {
    domain: r[0],
    generation: Number(r[1]),
    keyVersion: Number(r[2]),
    intentKey: typeof r[3] === 'string' ? r[3] : null,
    uncertain: r[4] === 1,
    unconfirmed: Number(r[5] ?? 0),
    errorCode: r[6],
    outcome: r[7],
    closedAt: r[8],
    lostAt: r[10] === null ? null : Number(r[10]),
    settleMs: r[11] === null || r[11] === undefined ? null : Number(r[11]),
  };
}

export const toHeld = (r: CompanyRow): HeldCompany => ({
  domain: r[0],
  name: r[1],
  boughtAt: Number(r[2]),
  lastUpdated: r[3],
  generation: Number(r[4]),
  credits: Number(r[5]),
});

/** The company as held by the store, read on `store`'s connection; null if not held. */
export function heldCompany(store: Connection, serviceId: number, domain: string): HeldCompany | null {
  const row = store.sql(`SELECT ${COMPANY_COLUMNS} FROM companies WHERE service = ? AND domain = ?`).raw(true).get([serviceId, domain]) as CompanyRow | undefined;
  return row === undefined ? null : toHeld(row);
}

const PRINTABLE_ASCII = /^[\x20-\x7e]*$/;

/**
 * What one transaction reads for decideBatch: every purchase and holding the batch touches, in two statements, valid only
 * inside that transaction (its write lock keeps other processes out). A key not read ahead (an import's) is read on first use.
 */
class SqliteBatchRead implements BatchReader {
  private readonly kept = new Map<string, KeptPurchase | null>();
  private readonly held = new Map<string, HeldCompany | null>();
  private runPerson: string | null | undefined;

  constructor(
    private readonly store: Connection,
    private readonly serviceId: number,
    private readonly run: number | null,
    private readonly now: number,
    /** The store id with the key epoch the run began under. */
    private readonly runStoreId: string | null = null,
  ) {}

  /** Reads ahead every purchase and holding the events will ask for. */
  readAhead(events: readonly StoreEvent[]): void {
    const companies = new Set<string>();
    const claimed = new Set<string>();
    for (const e of events) {
      // A domain is ASCII (pipeline/normalise.ts); anything else is read on its own, by its bytes, not through JSON.
      if (e.type === 'match' || !PRINTABLE_ASCII.test(e.company)) continue;
      companies.add(e.company);
      this.kept.set(purchaseKey(e.company, e.generation), null);
      if (e.type === 'intent') {
        claimed.add(e.company);
        this.held.set(e.company, null);
      }
    }
    if (companies.size > 0) {
      const rows = this.store.sql(`SELECT ${KEPT_COLUMNS} FROM purchases WHERE service = ? AND domain IN (SELECT value FROM json_each(?))`).raw(true).all([this.serviceId, JSON.stringify([...companies])]) as KeptRow[];
      for (const row of rows) {
        const key = purchaseKey(row[0], Number(row[1]));
        if (this.kept.has(key)) this.kept.set(key, toKept(row));
      }
    }
    if (claimed.size > 0) {
      const rows = this.store.sql(`SELECT ${COMPANY_COLUMNS} FROM companies WHERE service = ? AND domain IN (SELECT value FROM json_each(?))`).raw(true).all([this.serviceId, JSON.stringify([...claimed])]) as CompanyRow[];
      for (const row of rows) this.held.set(row[0], toHeld(row));
    }
  }

  purchase(domain: string, generation: number): KeptPurchase | null {
    const key = purchaseKey(domain, generation);
    let found = this.kept.get(key);
    if (found === undefined) {
      const row = this.store.sql(`SELECT ${KEPT_COLUMNS} FROM purchases WHERE service = ? AND domain = ? AND generation = ?`).raw(true).get([this.serviceId, domain, generation]) as KeptRow | undefined;
      found = row === undefined ? null : toKept(row);
      this.kept.set(key, found);
    }
    return found;
  }

  holding(domain: string): HeldCompany | null {
    let found = this.held.get(domain);
    if (found === undefined) {
      found = heldCompany(this.store, this.serviceId, domain);
      this.held.set(domain, found);
    }
    return found;
  }

  caps(): CapRow[] {
    const { since, until } = monthOf(this.now);
    return (this.store.sql(BUDGET_ROOM).raw(true).all([since, until, this.run]) as unknown[][]).map(capRow);
  }

  person(): string | null {
    if (this.runPerson === undefined) {
      const row = this.run === null ? undefined : (this.store.sql('SELECT user FROM runs WHERE id = ?').raw(true).get([this.run]) as [string | null] | undefined);
      this.runPerson = row?.[0] ?? null;
    }
    return this.runPerson;
  }

  alive(run: number): boolean {
    return this.store.runAlive(run, this.now);
  }

  private prunedSince: boolean | undefined;

  pruned(): boolean {
    return (this.prunedSince ??= this.runStoreId !== null && this.store.currentStoreId() !== this.runStoreId);
  }
}

/** A purchase's key in a batch's read: its company and generation. */
const purchaseKey = (domain: string, generation: number): string => `${generation} ${domain}`;

/**
 * A run's writes, a batch a transaction, on the run's connection or on its own in a worker thread (write-channel.ts),
 * so SQLite's work, most of a fast run's CPU, runs beside the requests rather than between them.
 */
export class RecordWriter {
  private synchronous: 'FULL' | 'NORMAL' | null = null;

  constructor(
    private readonly store: Connection,
    private readonly serviceId: number,
    private readonly run: number | null,
    /** The store id with the key epoch the run began under: a prune since refuses its new keys. */
    private readonly runStoreId: string | null = null,
  ) {}

  /** One transaction for the batch, fully synced only when it holds an intent; `now`: the run's clock when it left. Rolls back and throws on failure. */
  write(batch: readonly WriteItem[], now: number): Claim[] {
    const durable = batch.some((p) => p.durable);
    // WAL with synchronous=NORMAL survives a crash of this process (the OS holds the write);
    // only an intent needs to survive a power loss too, so only its batch syncs.
    this.setSynchronous(durable ? 'FULL' : 'NORMAL');
    const db = this.store.db;
    db.exec('BEGIN IMMEDIATE');
    try {
      // Lookups are most of a big run's rows: they go in many to a statement.
      this.insertLookups(batch, now);
      const events = batch.map((p) => p.event);
      const read = new SqliteBatchRead(this.store, this.serviceId, this.run, now, this.runStoreId);
      read.readAhead(events);
      const claims = this.apply(decideBatch(events, read, this.run, now));
      db.exec('COMMIT');
      return claims;
    } catch (error) {
      if (db.inTransaction) db.exec('ROLLBACK');
      throw error;
    }
  }

  /** Writes events of the past (an imported journal) in one transaction, each at its own time. */
  importEvents(events: readonly { event: StoreEvent; at: number }[]): void {
    // IMMEDIATE: each event reads before it writes, and a plain BEGIN would fail (SQLITE_BUSY_SNAPSHOT) if another process committed between.
    this.store.db.transaction(() => {
      // The past never replaces a newer lookup.
      const lookup = this.store.sql(
        `INSERT INTO lookups (service, domain, status, company, name, checked_at) VALUES (?, ?, ?, ?, ?, ?)
         ON CONFLICT (service, domain) DO UPDATE SET status = excluded.status, company = excluded.company, name = excluded.name, checked_at = excluded.checked_at
         WHERE excluded.checked_at >= lookups.checked_at`,
      );
      for (const { event: e, at } of events) if (e.type === 'match' && e.status !== 'error') lookup.run([this.serviceId, e.domain, e.status, e.company ?? null, e.name ?? null, at]);
      // The store's clock: who is alive now, and when a purchase the past closes may count.
      const now = this.store.options.now();
      const read = new SqliteBatchRead(this.store, this.serviceId, this.run, now);
      this.apply(decideBatch(events.map((e) => e.event), read, this.run, events.map((e) => e.at), now));
    }).immediate();
  }

  private setSynchronous(mode: 'FULL' | 'NORMAL'): void {
    if (this.synchronous === mode) return;
    this.store.db.pragma(`synchronous = ${mode}`);
    this.synchronous = mode;
  }

  private insertLookups(batch: readonly WriteItem[], now: number): void {
    const lookups: MatchEvent[] = [];
    for (const { event } of batch) if (event.type === 'match' && event.status !== 'error') lookups.push(event);
    // In key order: each leaf page of the table is then visited once, in turn.
    lookups.sort((a, b) => (a.domain < b.domain ? -1 : a.domain > b.domain ? 1 : 0));
    const rows: unknown[] = [];
    for (const event of lookups) rows.push(this.serviceId, event.domain, event.status, event.company ?? null, event.name ?? null, now);
    // A few statement sizes only: each prepared statement stays cached for the connection's life (one per size held 8 MiB).
    for (let at = 0; at < lookups.length; ) {
      const n = LOOKUP_ROWS.find((size) => size <= lookups.length - at) as number;
      this.store.sql(lookupInsert(n)).run(rows.slice(at * 6, (at + n) * 6));
      at += n;
    }
  }

  /** Writes what the rule decided, and answers each event's claim. */
  private apply(decision: BatchDecision): Claim[] {
    for (const r of decision.records) this.storeRecord(r);
    for (const p of decision.purchases) this.save(p);
    return decision.answers.map((a) => ('busy' in a ? this.busy(a.busy) : a));
  }

  /** Who holds a purchase this run may not claim: the host only when it is not this one. */
  private busy(run: number): Claim {
    const row = this.store.sql('SELECT pid, host FROM runs WHERE id = ?').raw(true).get([run]) as [number, string] | undefined;
    if (row === undefined) return { kind: 'busy' };
    return row[1] === this.store.host ? { kind: 'busy', pid: row[0] } : { kind: 'busy', pid: row[0], host: row[1] };
  }

  private save(p: KeptPurchase): void {
    this.store
      .sql(
        `INSERT INTO purchases (service, domain, generation, key_version, intent_key, uncertain, unconfirmed, error_code, lost_at, settle_ms, outcome, credits, owner_run, run, opened_at, closed_at, person, reserved, resumed)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (service, domain, generation) DO UPDATE SET
           key_version = excluded.key_version, intent_key = excluded.intent_key, uncertain = excluded.uncertain, unconfirmed = excluded.unconfirmed,
           error_code = excluded.error_code, lost_at = excluded.lost_at, settle_ms = excluded.settle_ms, outcome = excluded.outcome, credits = excluded.credits,
           owner_run = excluded.owner_run, run = excluded.run, closed_at = excluded.closed_at, person = excluded.person, reserved = excluded.reserved, resumed = excluded.resumed`,
      )
      .run([this.serviceId, p.domain, p.generation, p.keyVersion, p.intentKey, p.uncertain ? 1 : 0, p.unconfirmed, p.errorCode, p.lostAt, p.settleMs, p.outcome, p.credits, p.ownerRun, p.run, p.openedAt, p.closedAt, p.person, p.reserved, p.resumed ? 1 : 0]);
  }

  /** A hit's record, where it replaces the one held (purchase.ts replacesHeld). */
  private storeRecord({ event: e, at }: RecordWrite): void {
    this.store
      .sql(
        `INSERT INTO companies (service, domain, name, record, bought_at, last_updated, idempotency_key, credits, generation, run)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (service, domain) DO UPDATE SET name = excluded.name, record = excluded.record, bought_at = excluded.bought_at,
           last_updated = excluded.last_updated, idempotency_key = excluded.idempotency_key, credits = excluded.credits,
           generation = excluded.generation, run = excluded.run
         WHERE excluded.generation > companies.generation OR (excluded.generation = companies.generation AND excluded.bought_at >= companies.bought_at)`,
      )
      .run([this.serviceId, e.company, e.record.name, JSON.stringify(e.record), at, e.record.last_updated || null, e.keyUsed ?? null, e.charged ?? 0, e.generation, this.run]);
  }
}
