import type { CompanyRecord } from '../../api/types.js';
import { GroupCommit } from '../group-commit.js';
import { Heartbeat } from '../heartbeat.js';
import { LEASE_MS, StoreWriteError, type Connection } from './connection.js';
import type { Claim, CompanyState, HeldCompany, Lookup, Purchase, RunEnd, ServiceStore, StoreEvent } from '../types.js';
import { sqliteText } from '../ledger-sql.js';
import { parseRecord, RunRecords } from '../run-records.js';
import { openChannel, type WriteChannel, type WriterChoice } from './write-channel.js';
import { COMPANY_COLUMNS, PURCHASE_COLUMNS, RecordWriter, toHeld, toPurchase, type CompanyRow, type PurchaseRow, type WriteItem } from './writer.js';

/** Outcomes gather 20 ms (or 2,000 rows) per commit; intents only 1 ms (a paid call waits on their fsync). */
const TIMING = { batchMs: 20, batchRows: 2_000, intentGatherMs: 1 };
/** Records read by one statement (ServiceRecords.records). */
const RECORDS_AT_ONCE = 512;
/** Up to this many keys are always read by point queries (ServiceRecords.visit). */
const FEW_KEYS = 64;

/**
 * One service's records and this run's writes. Batches are group-committed (writer.ts), on the writer thread when the
 * build has one, and fully synced only when one holds an intent, so durability does not cap throughput.
 */
export class ServiceRecords extends RunRecords implements ServiceStore {
  readonly storeId: string;
  protected readonly group: GroupCommit;
  protected readonly heartbeat: Heartbeat;
  private readonly now: () => number;
  /** Transactions that synced to disk: one per batch holding an intent, not one per intent. */
  syncs = 0;
  private channel: WriteChannel | null = null;

  constructor(
    private readonly store: Connection,
    service: string,
    serviceId: number,
    run: number | null,
    policyNow: number = Date.now(),
    /** Where batches are committed: this thread (tests, imports), or the writer thread. */
    private readonly writer: WriterChoice = { kind: 'inline' },
  ) {
    super(service, serviceId, run, policyNow);
    this.storeId = store.storeId;
    this.now = store.options.now;
    this.group = new GroupCommit((batch) => this.commit(batch), (error) => new StoreWriteError(store.path, error), TIMING);
    // Nothing more is written once the lease cannot be renewed: the run ends on that failure, as on a commit's.
    const beat = run === null ? null : () => this.store.sql('UPDATE runs SET heartbeat_at = ? WHERE id = ?').run(this.now(), run);
    this.heartbeat = new Heartbeat(beat, LEASE_MS, store.options, (error) => this.group.fail(error));
  }

  protected async rows(text: string, params: readonly unknown[]): Promise<unknown[][]> {
    return this.store.sql(sqliteText(text)).raw(true).all(...params) as unknown[][];
  }

  protected among(column: string, n: number, list: readonly (string | number)[]): [string, unknown] {
    return [`${column} IN (SELECT value FROM json_each($${n}))`, JSON.stringify(list)];
  }

  protected storeNow(): number {
    return this.now();
  }

  /** Point queries for a few keys, one scan for many: past about an eighth of the table a scan beats a probe per key. */
  private visit<R extends unknown[]>(keys: readonly string[], table: string, columns: string, has: (domain: string) => boolean, each: (row: R) => void): void {
    if (keys.length === 0) return;
    // A few keys are point reads whatever the table's size: counting a large table would cost more.
    const count = keys.length <= FEW_KEYS ? Number.POSITIVE_INFINITY : (this.store.sql(`SELECT count(*) FROM ${table} WHERE service = ?`).raw(true).get(this.serviceId) as [number])[0];
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

  async loadLookups(domains: readonly string[], indexOf: (domain: string) => number | undefined, visit: (index: number, lookup: Lookup) => void): Promise<void> {
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

  /** Runs `read` in one read transaction: two reads apart could see a purchase closed but not the company it bought, and buy it again. */
  private snapshot<T>(read: () => T): T {
    const db = this.store.db;
    if (db.inTransaction) return read();
    db.exec('BEGIN');
    try {
      return read();
    } finally {
      if (db.inTransaction) db.exec('COMMIT');
    }
  }

  async loadCompanies(companies: readonly string[], visit: (domain: string, state: CompanyState) => void): Promise<void> {
    const wanted = new Set(companies);
    const held = new Map<string, HeldCompany>();
    const latest = new Map<string, Purchase>();
    this.snapshot(() => {
      this.visit<CompanyRow>(companies, 'companies', COMPANY_COLUMNS, (d) => wanted.has(d), (r) => held.set(r[0], toHeld(r)));
      this.visit<PurchaseRow>(companies, 'purchases', PURCHASE_COLUMNS, (d) => wanted.has(d), (r) => {
        const p = toPurchase(r);
        const prev = latest.get(p.domain);
        if (prev === undefined || p.generation > prev.generation) latest.set(p.domain, p);
      });
    });
    for (const domain of companies) {
      const h = held.get(domain) ?? null;
      const p = latest.get(domain) ?? null;
      if (h !== null || p !== null) visit(domain, { held: h, purchase: p });
    }
  }

  async companyState(company: string): Promise<CompanyState> {
    let state: CompanyState = { held: null, purchase: null };
    await this.loadCompanies([company], (_, found) => (state = found));
    return state;
  }

  /** In one read transaction, many keys a statement (a point read each cost four times as much). */
  async records(companies: readonly string[]): Promise<Map<string, CompanyRecord>> {
    const found = new Map<string, CompanyRecord>();
    if (companies.length === 0) return found;
    this.snapshot(() => {
      const read = this.store.sql('SELECT domain, record FROM companies WHERE service = ? AND domain IN (SELECT value FROM json_each(?))').raw(true);
      for (let at = 0; at < companies.length; at += RECORDS_AT_ONCE) {
        for (const row of read.iterate([this.serviceId, JSON.stringify(companies.slice(at, at + RECORDS_AT_ONCE))]) as Iterable<[string, string]>) {
          const record = parseRecord(row[1]);
          if (record !== null) found.set(row[0], record);
        }
      }
    });
    return found;
  }

  /** One batch, in one transaction, on the writer thread or this one. */
  private async commit(batch: readonly WriteItem[]): Promise<Claim[]> {
    this.channel ??= openChannel(this.writer, this.store, this.serviceId, this.run, this.storeId);
    // The queued items as they are: their callbacks are left out of the JSON the writer thread is sent.
    const claims = await this.channel.write(batch, this.now());
    if (batch.some((p) => p.durable)) this.syncs++;
    return claims;
  }

  /** Writes events of the past (an imported journal) in one transaction, each at its own time. */
  importEvents(events: readonly { event: StoreEvent; at: number }[]): void {
    new RecordWriter(this.store, this.serviceId, this.run).importEvents(events);
  }

  /** Waits for every queued write, then stops the writer thread, if one was started. */
  async close(): Promise<void> {
    try {
      await this.flush();
    } finally {
      await this.channel?.close();
    }
  }

  /** Says every few seconds that this run is alive, so others wait for its claims and no longer. */
  startHeartbeat(): void {
    this.heartbeat.start();
  }

  async releaseClaims(): Promise<void> {
    this.heartbeat.stop();
    if (this.run === null || this.group.failure !== null) return;
    this.store.sql('UPDATE purchases SET owner_run = NULL WHERE owner_run = ?').run(this.run);
  }

  async endRun(end: RunEnd): Promise<void> {
    this.heartbeat.stop();
    if (this.run === null) return;
    this.store.sql('UPDATE runs SET ended_at = ?, status = ?, credits = ?, bought = ?, reused = ? WHERE id = ?')
      .run(this.now(), end.status, end.credits, end.bought, end.reused, this.run);
  }
}
