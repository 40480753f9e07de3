import type { Connection } from './connection.js';
import type { Claim, EnrichEvent, HeldCompany, IntentEvent, MatchEvent, Purchase, StoreEvent } from '../types.js';

/** One queued write, and whether the caller needs it on disk before going on (an intent). */
export interface WriteItem {
  event: StoreEvent;
  durable: boolean;
}

/** The claim of an event that claims nothing (all but intents), and of an intent this run may buy under. */
export const OK: Claim = { kind: 'ok' };
/** Lookups per INSERT statement (6 parameters each, well under SQLite's limit of 32,766). */
const LOOKUP_ROWS = 200;

export type PurchaseRow = [string, number, number, string | null, number, number, string | null, Purchase['outcome'], number | null, number | null, number | null];
export type CompanyRow = [string, string, number, string | null, number, number];
export const PURCHASE_COLUMNS = 'domain, generation, key_version, intent_key, uncertain, unconfirmed, error_code, outcome, closed_at, owner_run, lost_at';
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
  const row = store.sql(`SELECT ${COMPANY_COLUMNS} FROM companies WHERE service = ? AND domain = ?`).raw(true).get(serviceId, domain) as CompanyRow | undefined;
  return row === undefined ? null : toHeld(row);
}

/** Whether a held record is fresh by the buyer's rule (IntentEvent.freshSince). */
function heldFresh(held: HeldCompany, event: IntentEvent): boolean {
  if (event.freshSince === undefined) return false;
  return event.freshSince === null || held.boughtAt >= event.freshSince;
}

/** An open purchase an attempt may have been sent under: its key may have been charged. */
export const mayBeCharged = (p: Purchase): boolean => p.outcome === 'open' && (p.intentKey !== null || p.uncertain);

/**
 * A run's writes to one service's records, a batch to a transaction. It runs on whichever
 * connection it is given: the run's own (tests, imports, a store that cannot spare a thread), or
 * a connection of its own on a worker thread (write-channel.ts), so that SQLite's work, most of a
 * fast run's CPU, is done beside the requests rather than between them.
 */
export class RecordWriter {
  private synchronous: 'FULL' | 'NORMAL' | null = null;

  constructor(
    private readonly store: Connection,
    private readonly serviceId: number,
    private readonly run: number | null,
  ) {}

  /**
   * One transaction for the batch, synced to disk (synchronous=FULL) only when one of its items
   * must be durable (an intent), so durability does not cap throughput. `now` is the run's clock
   * when the batch left (ms since the epoch). Throws, having rolled back, on any failure.
   */
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
      const claims = batch.map((p) => (p.event.t === 'match' ? OK : this.apply(p.event, now)));
      db.exec('COMMIT');
      return claims;
    } catch (error) {
      if (db.inTransaction) db.exec('ROLLBACK');
      throw error;
    }
  }

  /** Writes events of the past (an imported journal) in one transaction, each at its own time. */
  importEvents(events: readonly { event: StoreEvent; at: number }[]): void {
    this.store.db.transaction(() => {
      for (const { event, at } of events) this.apply(event, at);
    })();
  }

  private setSynchronous(mode: 'FULL' | 'NORMAL'): void {
    if (this.synchronous === mode) return;
    this.store.db.pragma(`synchronous = ${mode}`);
    this.synchronous = mode;
  }

  private insertLookups(batch: readonly WriteItem[], now: number): void {
    const lookups: MatchEvent[] = [];
    for (const { event } of batch) if (event.t === 'match' && event.s !== 'error') lookups.push(event);
    // In key order: each leaf page of the table is then visited once, in turn.
    lookups.sort((a, b) => (a.d < b.d ? -1 : a.d > b.d ? 1 : 0));
    const rows: unknown[] = [];
    for (const event of lookups) rows.push(this.serviceId, event.d, event.s, event.c ?? null, event.n ?? null, now);
    for (let at = 0; at < rows.length; at += LOOKUP_ROWS * 6) {
      const chunk = rows.slice(at, at + LOOKUP_ROWS * 6);
      const n = chunk.length / 6;
      this.store.sql(`INSERT OR REPLACE INTO lookups (service, domain, status, company, name, checked_at) VALUES ${'(?, ?, ?, ?, ?, ?), '.repeat(n - 1)}(?, ?, ?, ?, ?, ?)`).run(...chunk);
    }
  }

  private apply(event: StoreEvent, now: number): Claim {
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
      case 'release':
        if (this.run !== null) {
          this.store
            .sql(`UPDATE purchases SET owner_run = NULL WHERE service = ? AND domain = ? AND generation = ? AND owner_run = ? AND outcome = 'open'`)
            .run(this.serviceId, event.c, event.g, this.run);
        }
        return OK;
      case 'unclaim':
        this.store
          .sql(
            `UPDATE purchases SET intent_key = NULL, owner_run = NULL, lost_at = NULL
             WHERE service = ? AND domain = ? AND generation = ? AND key_version = ? AND intent_key = ? AND outcome = 'open' AND uncertain = 0${this.run === null ? '' : ' AND owner_run = ?'}`,
          )
          .run(this.serviceId, event.c, event.g, event.v, event.key, ...(this.run === null ? [] : [this.run]));
        return OK;
    }
  }

  /** Whether the run that owns an open intent may still be sending under it. */
  private runAlive(run: number, now: number): boolean {
    return run === this.run || this.store.runAlive(run, now);
  }

  /**
   * The intent, written only if this run may buy: no other live run holds the purchase open, and
   * no run has bought this generation since the plan was made. A purchase another run moved on
   * since this one read it (a new key version, an outcome) is handed back for the caller to adopt.
   */
  private claim(event: IntentEvent, now: number): Claim {
    const held = heldCompany(this.store, this.serviceId, event.c);
    if (held !== null && held.generation >= event.g) return { kind: 'held', held };
    const row = this.store.sql(`SELECT ${PURCHASE_COLUMNS} FROM purchases WHERE service = ? AND domain = ? AND generation = ?`)
      .raw(true)
      .get(this.serviceId, event.c, event.g) as PurchaseRow | undefined;
    // A company held fresh is never bought again, whatever the plan believed (it may have read
    // the store while another run was buying): only a purchase whose key may have been charged
    // is finished, under that key, since only it can recover that charge for free.
    if (held !== null && heldFresh(held, event) && (row === undefined || !mayBeCharged(toPurchase(row)))) return { kind: 'held', held };
    let tookOver = false;
    if (row !== undefined) {
      const owner = row[9];
      if (row[7] === 'open' && owner !== null && owner !== this.run && this.runAlive(owner, now)) {
        const run = this.store.sql('SELECT pid, host FROM runs WHERE id = ?').raw(true).get(owner) as [number, string] | undefined;
        if (run === undefined) return { kind: 'busy' };
        // The host only when it is another machine's (a store on a share).
        return run[1] === this.store.host ? { kind: 'busy', pid: run[0] } : { kind: 'busy', pid: run[0], host: run[1] };
      }
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
      this.store.sql(`UPDATE purchases SET outcome = 'failed', intent_key = NULL, owner_run = NULL, error_code = ?, credits = credits + ?, run = ?, closed_at = ? ${where}`).run(e.code ?? 'error', charged, this.run, now, ...id);
    } else if (e.key === 'retired') {
      // Proven uncharged: a service that stored this error under the key would replay it forever.
      // Only the key this run sent under, on a purchase still open and still this run's: a run
      // retires a key before it lets the purchase go, so a retire arriving once another run has
      // taken it over (and perhaps sent under that key, perhaps handed it back since) is stale,
      // and must not free the purchase for a new key.
      const mine = this.run === null ? '' : " AND key_version = ? AND owner_run = ? AND outcome = 'open'";
      this.store.sql(`UPDATE purchases SET key_version = ?, intent_key = NULL, uncertain = 0, lost_at = NULL, error_code = ?, unconfirmed = unconfirmed + ? ${where}${mine}`)
        .run(e.v + 1, e.code ?? 'error', e.unconfirmed === true ? 1 : 0, ...id, ...(this.run === null ? [] : [e.v, this.run]));
    } else {
      this.store
        .sql(`UPDATE purchases SET uncertain = 1, error_code = ?, lost_at = CASE WHEN ? THEN ? ELSE lost_at END ${where}`)
        .run(e.code ?? 'error', e.lost === true ? 1 : 0, now, ...id);
    }
  }
}
