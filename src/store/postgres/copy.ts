import { EnrichError } from '../../errors.js';
import { companyWins, COPY_COLUMNS, PURCHASE_UPDATE, copiedGeneration, LeftBusy, copiedPurchase, copiedRun, lookupWins, mapRun, noPurchases, purchaseMove, runKey, tally, toCopyLookup, toKept } from '../copy.js';
import type { CopyCompany, CopyLookup, CopyRun, CopyTarget, PurchasesCopied, RunIds } from '../copy-types.js';
import type { KeptPurchase } from '../purchase.js';
import { RUN_ALIVE } from './writer.js';
import type { Session } from './connect.js';
import { LEASE_MS } from './writer.js';
import type { PgStore } from './store.js';

/** What the team store's ledger lends its copy target: its transactions, locks and judgement of runs. */
export interface PgCopyHelp {
  deadHere(): Promise<number[]>;
  lockCompanies(serviceId: number, domains: readonly string[]): Promise<void>;
  /** One transaction (a dry run's only reads, in none). */
  transaction<T>(work: () => Promise<T>): Promise<T>;
  end(): Promise<void>;
}

/**
 * The team store receiving a copy: each chunk one transaction taking the same company locks as a run's claims and outcomes, so a copy
 * never writes under a run's feet; the writes' WHERE repeats the rule as a second guard. A dry run only reads, holding no lock.
 */
export class PgCopyTarget implements CopyTarget {
  private readonly db: Session;
  private readonly leftBusy = new LeftBusy();

  constructor(
    private readonly store: PgStore,
    readonly dryRun: boolean,
    private readonly help: PgCopyHelp,
  ) {
    this.db = store.db;
  }

  /** The service's id in the target; a dry run makes none (-1: the target has nothing of it). */
  private async service(name: string): Promise<number> {
    if (!this.dryRun) return this.store.serviceId(name);
    const { rows } = await this.db.query<{ id: number }>('SELECT id FROM services WHERE name = $1', [name]);
    return rows[0] === undefined ? -1 : Number(rows[0].id);
  }

  private async lock(serviceId: number, domains: readonly string[]): Promise<void> {
    if (!this.dryRun) await this.help.lockCompanies(serviceId, domains);
  }

  async runs(service: string, list: readonly CopyRun[]): Promise<{ ids: RunIds; added: number }> {
    const ids = new Map<number, number>();
    const added = await this.help.transaction(async () => {
      const serviceId = await this.service(service);
      const held = new Map<string, { id: number; endedAt: number | null }>();
      const { rows: there } = await this.db.query<{ id: number; started_at: number; pid: number; host: string; ended_at: number | null }>(
        'SELECT id, started_at, pid, host, ended_at FROM runs WHERE service = $1',
        [serviceId],
      );
      for (const r of there) held.set(runKey({ startedAt: Number(r.started_at), pid: r.pid, host: r.host }), { id: Number(r.id), endedAt: r.ended_at });
      const fresh: CopyRun[] = [];
      for (const source of list) {
        const found = held.get(runKey(source));
        if (found === undefined) fresh.push(copiedRun(source));
        else {
          ids.set(source.id, found.id);
          // Copied before while it was under way: it has ended since.
          if (found.endedAt === null && source.endedAt !== null && !this.dryRun) {
            await this.db.query('UPDATE runs SET ended_at = $1, status = $2, credits = $3, bought = $4, reused = $5 WHERE id = $6', [source.endedAt, source.status, source.credits, source.bought, source.reused, found.id]);
          }
        }
      }
      if (fresh.length === 0 || this.dryRun) return fresh.length;
      const col = <K extends keyof CopyRun>(k: K): CopyRun[K][] => fresh.map((r) => r[k]);
      const { rows } = await this.db.query<{ id: number; started_at: number; pid: number; host: string }>(
        `INSERT INTO runs (service, started_at, ended_at, pid, host, "user", tool, input_name, input_sha256, rows, dry_run, options, status, heartbeat_at, policy_now, credits, bought, reused)
         SELECT $1, u.* FROM unnest($2::bigint[], $3::bigint[], $4::int[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::int[], $11::int[], $12::text[], $13::text[], $14::bigint[], $15::bigint[], $16::int[], $17::int[], $18::int[]) AS u
         RETURNING id, started_at, pid, host`,
        [
          serviceId,
          col('startedAt'),
          col('endedAt'),
          col('pid'),
          col('host'),
          col('user'),
          col('tool'),
          col('inputName'),
          col('inputSha256'),
          col('rows'),
          fresh.map((r) => (r.dryRun ? 1 : 0)),
          col('options'),
          col('status'),
          col('heartbeatAt'),
          col('policyNow'),
          col('credits'),
          col('bought'),
          col('reused'),
        ],
      );
      const made = new Map(rows.map((r) => [runKey({ startedAt: Number(r.started_at), pid: r.pid, host: r.host }), Number(r.id)]));
      for (const r of fresh) ids.set(r.id, made.get(runKey(r)) as number);
      return rows.length;
    });
    return { ids, added };
  }

  async lookups(service: string, rows: readonly CopyLookup[]): Promise<number> {
    return this.help.transaction(async () => {
      const serviceId = await this.service(service);
      const { rows: found } = await this.db.query<Record<string, unknown>>('SELECT domain, status, company, name, checked_at FROM lookups WHERE service = $1 AND domain = any($2::text[])', [serviceId, rows.map((l) => l.domain)]);
      const there = new Map(found.map((r) => [String(r['domain']), toCopyLookup(r)]));
      const taken = rows.filter((l) => lookupWins(l, there.get(l.domain) ?? null));
      if (taken.length === 0 || this.dryRun) return taken.length;
      const result = await this.db.query(
        `INSERT INTO lookups AS l (service, domain, status, company, name, checked_at)
         SELECT $1, u.* FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[]) AS u
         ON CONFLICT (service, domain) DO UPDATE SET status = excluded.status, company = excluded.company, name = excluded.name, checked_at = excluded.checked_at
         WHERE excluded.checked_at > l.checked_at`,
        [serviceId, taken.map((l) => l.domain), taken.map((l) => l.status), taken.map((l) => l.company), taken.map((l) => l.name), taken.map((l) => l.checkedAt)],
      );
      return result.rowCount ?? 0;
    });
  }

  async companies(service: string, rows: readonly CopyCompany[], ids: RunIds): Promise<number> {
    const dead = await this.help.deadHere();
    return this.help.transaction(async () => {
      const serviceId = await this.service(service);
      await this.lock(serviceId, rows.map((c) => c.domain));
      const { rows: found } = await this.db.query<{ domain: string; generation: number; bought_at: number }>(
        'SELECT domain, generation, bought_at FROM companies WHERE service = $1 AND domain = any($2::text[])',
        [serviceId, rows.map((c) => c.domain)],
      );
      const there = new Map(found.map((r) => [r.domain, { generation: Number(r.generation), boughtAt: Number(r.bought_at) }]));
      const buying = await this.buying(serviceId, rows.map((c) => c.domain), dead);
      for (const d of buying) this.leftBusy.add(service, d);
      const taken = rows.filter((c) => companyWins(c, there.get(c.domain) ?? null, buying.has(c.domain)));
      if (taken.length === 0 || this.dryRun) return taken.length;
      const col = <K extends keyof CopyCompany>(k: K): CopyCompany[K][] => taken.map((c) => c[k]);
      // The company locks are held: nothing has changed what was read since.
      const result = await this.db.query(
        `INSERT INTO companies AS c (service, domain, name, record, bought_at, last_updated, idempotency_key, credits, generation, run)
         SELECT $1, u.* FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[], $7::text[], $8::int[], $9::int[], $10::bigint[]) AS u
         ON CONFLICT (service, domain) DO UPDATE SET name = excluded.name, record = excluded.record, bought_at = excluded.bought_at, last_updated = excluded.last_updated,
           idempotency_key = excluded.idempotency_key, credits = excluded.credits, generation = excluded.generation, run = excluded.run
         WHERE excluded.bought_at > c.bought_at`,
        [
          serviceId,
          col('domain'),
          col('name'),
          col('record'),
          col('boughtAt'),
          col('lastUpdated'),
          col('idempotencyKey'),
          col('credits'),
          taken.map((c) => copiedGeneration(c, there.get(c.domain) ?? null)),
          taken.map((c) => mapRun(c.run, ids)),
        ],
      );
      return result.rowCount ?? 0;
    });
  }

  /** The companies of `domains` that a live run of the target holds a purchase of open: it is buying them now. */
  private async buying(serviceId: number, domains: readonly string[], dead: readonly number[]): Promise<Set<string>> {
    const { rows } = await this.db.query<{ domain: string }>(
      `SELECT DISTINCT p.domain FROM purchases p JOIN runs o ON o.id = p.owner_run
        WHERE p.service = $1 AND p.domain = ANY($2::text[]) AND p.outcome = 'open' AND ${RUN_ALIVE('o', '$3', String(LEASE_MS))}`,
      [serviceId, [...new Set(domains)], dead],
    );
    return new Set(rows.map((r) => r.domain));
  }

  async purchases(service: string, rows: readonly KeptPurchase[], ids: RunIds): Promise<PurchasesCopied> {
    const dead = await this.help.deadHere();
    return this.help.transaction(async () => {
      const serviceId = await this.service(service);
      await this.lock(serviceId, rows.map((p) => p.domain));
      const { rows: found } = await this.db.query<Record<string, unknown>>(
        `SELECT ${COPY_COLUMNS.purchases.split(', ').map((c) => `p.${c}`).join(', ')}
           FROM purchases p JOIN unnest($2::text[], $3::int[]) AS u(domain, generation) ON p.domain = u.domain AND p.generation = u.generation
          WHERE p.service = $1 AND p.domain = ANY($2::text[])`,
        [serviceId, rows.map((p) => p.domain), rows.map((p) => p.generation)],
      );
      const there = new Map(found.map((r) => [`${String(r['domain'])} ${Number(r['generation'])}`, toKept(r)]));
      const buying = await this.buying(serviceId, rows.map((p) => p.domain), dead);
      const counts = noPurchases();
      const taken: KeptPurchase[] = [];
      for (const source of rows) {
        const t = there.get(`${source.domain} ${source.generation}`) ?? null;
        const move = purchaseMove(source, t, buying.has(source.domain) || this.leftBusy.has(service, source.domain));
        tally(counts, move, source, t);
        if (move === 'add' || move === 'close') taken.push(copiedPurchase(source, t, ids));
      }
      if (taken.length > 0 && !this.dryRun) await this.write(serviceId, taken);
      return counts;
    });
  }

  /** Writes the purchases the rules took; the WHERE guard rechecks each row under the locks, and a refused row undoes the chunk rather than let the counts lie. */
  private async write(serviceId: number, list: readonly KeptPurchase[]): Promise<void> {
    const col = <K extends keyof KeptPurchase>(k: K): KeptPurchase[K][] => list.map((p) => p[k]);
    const { rowCount } = await this.db.query(
      `INSERT INTO purchases (service, ${COPY_COLUMNS.purchases})
       SELECT $1, u.* FROM unnest($2::text[], $3::int[], $4::int[], $5::text[], $6::int[], $7::int[], $8::text[], $9::bigint[], $10::bigint[], $11::text[], $12::int[], $13::bigint[], $14::bigint[], $15::bigint[], $16::bigint[], $17::text[], $18::int[]) AS u
       ON CONFLICT (service, domain, generation) DO UPDATE SET ${PURCHASE_UPDATE}
       WHERE purchases.outcome = 'open' AND (excluded.outcome <> 'open' OR (purchases.intent_key IS NULL AND purchases.uncertain = 0))
       RETURNING 1`,
      [
        serviceId,
        col('domain'),
        col('generation'),
        col('keyVersion'),
        col('intentKey'),
        list.map((p) => (p.uncertain ? 1 : 0)),
        col('unconfirmed'),
        col('errorCode'),
        col('lostAt'),
        col('settleMs'),
        col('outcome'),
        col('credits'),
        col('ownerRun'),
        col('run'),
        col('openedAt'),
        col('closedAt'),
        col('person'),
        col('reserved'),
      ],
    );
    if (rowCount !== list.length) throw new EnrichError(`the copy wrote ${rowCount ?? 0} of the ${list.length} purchases it decided to take in one chunk; that chunk was undone`, 'failure');
  }

  end(): Promise<void> {
    return this.help.end();
  }
}
