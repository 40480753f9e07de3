import { companyWins, COPY_COLUMNS, PURCHASE_UPDATE, copiedGeneration, LeftBusy, copiedPurchase, copiedRun, lookupWins, mapRun, noPurchases, purchaseMove, runKey, tally, toCopyLookup, toKept } from '../copy.js';
import type { CopyCompany, CopyLookup, CopyRun, CopyTarget, PurchasesCopied, RunIds } from '../copy-types.js';
import type { KeptPurchase } from '../purchase.js';
import type { Store } from './store.js';
import { num, numOrNull } from '../ledger-sql.js';

/** One person's store receiving a copy, a write transaction per chunk; a dry run only reads and decides, holding no lock. */
export class SqliteCopyTarget implements CopyTarget {
  private readonly leftBusy = new LeftBusy();

  constructor(
    private readonly store: Store,
    private readonly dryRun: boolean,
  ) {}

  private transaction<T>(work: () => T): T {
    if (this.dryRun) return work();
    const db = this.store.db;
    db.exec('BEGIN IMMEDIATE');
    try {
      const result = work();
      db.exec('COMMIT');
      return result;
    } catch (error) {
      if (db.inTransaction) db.exec('ROLLBACK');
      throw error;
    }
  }

  /** The service's id in the target; a dry run makes none (-1: the target has nothing of it). */
  private service(name: string): number {
    if (!this.dryRun) return this.store.serviceId(name);
    const row = this.store.db.prepare('SELECT id FROM services WHERE name = ?').raw(true).get(name) as [number] | undefined;
    return row?.[0] ?? -1;
  }

  async runs(service: string, list: readonly CopyRun[]): Promise<{ ids: RunIds; added: number }> {
    const ids = new Map<number, number>();
    let added = 0;
    this.transaction(() => {
      const serviceId = this.service(service);
      const held = new Map<string, { id: number; endedAt: number | null }>();
      for (const r of this.store.db.prepare('SELECT id, started_at, pid, host, ended_at FROM runs WHERE service = ?').all(serviceId) as Record<string, unknown>[]) {
        held.set(runKey({ startedAt: num(r['started_at']), pid: num(r['pid']), host: String(r['host']) }), { id: num(r['id']), endedAt: numOrNull(r['ended_at']) });
      }
      const insert = this.store.db.prepare(
        `INSERT INTO runs (service, started_at, ended_at, pid, host, user, tool, input_name, input_sha256, rows, dry_run, options, status, heartbeat_at, policy_now, credits, bought, reused)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      );
      const finish = this.store.db.prepare('UPDATE runs SET ended_at = ?, status = ?, credits = ?, bought = ?, reused = ? WHERE id = ?');
      for (const source of list) {
        const there = held.get(runKey(source));
        if (there !== undefined) {
          // Copied before while it was under way: it has ended since.
          if (there.endedAt === null && source.endedAt !== null && !this.dryRun) finish.run(source.endedAt, source.status, source.credits, source.bought, source.reused, there.id);
          ids.set(source.id, there.id);
          continue;
        }
        added++;
        if (this.dryRun) continue;
        const r = copiedRun(source);
        const result = insert.run(serviceId, r.startedAt, r.endedAt, r.pid, r.host, r.user, r.tool, r.inputName, r.inputSha256, r.rows, r.dryRun ? 1 : 0, r.options, r.status, r.heartbeatAt, r.policyNow, r.credits, r.bought, r.reused);
        ids.set(source.id, Number(result.lastInsertRowid));
      }
    });
    return { ids, added };
  }

  async lookups(service: string, rows: readonly CopyLookup[]): Promise<number> {
    return this.transaction(() => {
      const serviceId = this.service(service);
      const read = this.store.db.prepare('SELECT domain, status, company, name, checked_at FROM lookups WHERE service = ? AND domain = ?');
      const write = this.store.db.prepare('INSERT OR REPLACE INTO lookups (service, domain, status, company, name, checked_at) VALUES (?, ?, ?, ?, ?, ?)');
      let written = 0;
      for (const l of rows) {
        const there = read.get(serviceId, l.domain) as Record<string, unknown> | undefined;
        if (!lookupWins(l, there === undefined ? null : toCopyLookup(there))) continue;
        if (!this.dryRun) write.run(serviceId, l.domain, l.status, l.company, l.name, l.checkedAt);
        written++;
      }
      return written;
    });
  }

  async companies(service: string, rows: readonly CopyCompany[], ids: RunIds): Promise<number> {
    return this.transaction(() => {
      const serviceId = this.service(service);
      const read = this.store.db.prepare('SELECT generation, bought_at FROM companies WHERE service = ? AND domain = ?');
      const buying = this.buying(serviceId);
      const write = this.store.db.prepare(
        `INSERT OR REPLACE INTO companies (service, domain, name, record, bought_at, last_updated, idempotency_key, credits, generation, run) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      );
      let written = 0;
      for (const c of rows) {
        const found = read.get(serviceId, c.domain) as Record<string, unknown> | undefined;
        const there = found === undefined ? null : { generation: num(found['generation']), boughtAt: num(found['bought_at']) };
        const busy = buying(c.domain);
        if (busy) this.leftBusy.add(service, c.domain);
        if (!companyWins(c, there, busy)) continue;
        if (!this.dryRun) write.run(serviceId, c.domain, c.name, c.record, c.boughtAt, c.lastUpdated, c.idempotencyKey, c.credits, copiedGeneration(c, there), mapRun(c.run, ids));
        written++;
      }
      return written;
    });
  }

  /** Whether a live run of this store holds a purchase of the company open: it is buying it now. */
  private buying(serviceId: number): (domain: string) => boolean {
    const owners = this.store.db.prepare("SELECT owner_run FROM purchases WHERE service = ? AND domain = ? AND outcome = 'open' AND owner_run IS NOT NULL");
    return (domain) => (owners.all(serviceId, domain) as { owner_run: number }[]).some((r) => this.store.runAlive(num(r.owner_run)));
  }

  async purchases(service: string, rows: readonly KeptPurchase[], ids: RunIds): Promise<PurchasesCopied> {
    return this.transaction(() => {
      const serviceId = this.service(service);
      const read = this.store.db.prepare(`SELECT ${COPY_COLUMNS.purchases} FROM purchases WHERE service = ? AND domain = ? AND generation = ?`);
      const write = this.store.db.prepare(
        `INSERT INTO purchases (service, ${COPY_COLUMNS.purchases}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (service, domain, generation) DO UPDATE SET ${PURCHASE_UPDATE}`,
      );
      const counts = noPurchases();
      const buying = this.buying(serviceId);
      for (const source of rows) {
        const found = read.get(serviceId, source.domain, source.generation) as Record<string, unknown> | undefined;
        const there = found === undefined ? null : toKept(found);
        const move = purchaseMove(source, there, buying(source.domain) || this.leftBusy.has(service, source.domain));
        tally(counts, move, source, there);
        if ((move !== 'add' && move !== 'close') || this.dryRun) continue;
        const p = copiedPurchase(source, there, ids);
        write.run(serviceId, p.domain, p.generation, p.keyVersion, p.intentKey, p.uncertain ? 1 : 0, p.unconfirmed, p.errorCode, p.lostAt, p.settleMs, p.outcome, p.credits, p.ownerRun, p.run, p.openedAt, p.closedAt, p.person, p.reserved);
      }
      return counts;
    });
  }

  async end(): Promise<void> {}
}
