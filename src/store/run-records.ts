import type { CompanyRecord } from '../api/types.js';
import { capRow, lineOf, monthOf, runBudgetSql, type BudgetLine } from './budget.js';
import type { GroupCommit } from './group-commit.js';
import type { Heartbeat } from './heartbeat.js';
import { num, otherRunsSql, underWay } from './ledger-sql.js';
import type { Claim, MonthSpend, RunsUnderWay, StoreEvent } from './types.js';

/** A run within this long of the job it continues keeps that job's moment. */
const RESUME_WITHIN_MS = 24 * 3600_000;

/** Whether the last run on the input is the same job, recent enough to keep its moment were it cut short. */
export const sameJob = (last: Omit<LastRun, 'alive'>, maxAge: number, now: number): last is Omit<LastRun, 'alive'> & { policyNow: number } =>
  last.policyNow !== null && last.maxAge === maxAge && now - last.policyNow <= RESUME_WITHIN_MS;

/** The last real run on an input, as policyNowAfter reads it; `alive` is asked only of one marked running. */
export interface LastRun {
  status: string;
  policyNow: number | null;
  maxAge: number | null;
  alive(): boolean;
}

/**
 * When freshness is judged: now, unless this run resumes a job cut short (the last real run on its input and service, with its
 * --max-age, within a day, ended unfinished), whose moment it keeps so its refreshes don't go stale again.
 */
export function policyNowAfter(last: LastRun | undefined, maxAge: number, now: number): number {
  if (last === undefined || !sameJob(last, maxAge, now)) return now;
  const cutShort = last.status === 'interrupted' || last.status === 'stopped' || last.status === 'failed' || (last.status === 'running' && !last.alive());
  return cutShort ? last.policyNow : now;
}

/** Validates a record read back: a tampered or damaged row is treated as not held. */
export function parseRecord(text: string): CompanyRecord | null {
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
 * What one run's records (ServiceStore) do alike on both backends: the group commit and lease it writes under, and the reads written
 * once, with `$n` placeholders (store/ledger-sql.ts), rows as arrays in column order.
 */
export abstract class RunRecords {
  protected abstract readonly group: GroupCommit;
  protected abstract readonly heartbeat: Heartbeat;

  constructor(
    readonly service: string,
    protected readonly serviceId: number,
    protected readonly run: number | null,
    /** The moment this run judges freshness at (a resumed job keeps its own). */
    readonly policyNow: number,
  ) {}

  /** One read. */
  protected abstract rows(text: string, params: readonly unknown[]): Promise<unknown[][]>;
  /** The backend's SQL of "`column` is among the list $n", and that parameter's value for `list`. */
  protected abstract among(column: string, n: number, list: readonly (string | number)[], type: 'text' | 'bigint'): [string, unknown];
  /** The store's clock. */
  protected abstract storeNow(): number;

  get runId(): number {
    return this.run ?? 0;
  }

  append(event: StoreEvent, durable = false): Promise<Claim> {
    return this.group.append(event, durable);
  }

  flush(): Promise<void> {
    return this.group.flush();
  }

  /** Once, every run; after that by id only (a store's runs are never deleted: a scan each second would grow with them). */
  async otherRuns(known: readonly number[], after: number | null): Promise<RunsUnderWay> {
    const mine = [this.serviceId, this.run ?? 0];
    if (after === null) return underWay(await this.rows(otherRunsSql(null), mine), after);
    const [among, ids] = this.among('id', 4, known, 'bigint');
    return underWay(await this.rows(otherRunsSql(among), [...mine, after, ids]), after);
  }

  /** Whether the store holds anything of this service: if not, a first-met company needs no look-up (the claim always looks anyway). */
  async holdsAny(): Promise<boolean> {
    const [row] = await this.rows('SELECT EXISTS (SELECT 1 FROM companies WHERE service = $1) OR EXISTS (SELECT 1 FROM purchases WHERE service = $1) AS held', [this.serviceId]);
    return row?.[0] === true || row?.[0] === 1;
  }

  /** Credits this store saw this service spend since `since`: closed purchases plus keys retired as possibly charged. Not other tools on the account, nor rollover (spec 8.6). */
  async creditsSince(since: number): Promise<MonthSpend> {
    const [row] = await this.rows('SELECT coalesce(sum(credits), 0) AS charged, coalesce(sum(unconfirmed), 0) AS unconfirmed FROM purchases WHERE service = $1 AND closed_at >= $2', [this.serviceId, since]);
    return { charged: num(row?.[0]), unconfirmed: num(row?.[1]) };
  }

  async budget(): Promise<BudgetLine[]> {
    if (this.run === null) return [];
    const { since, until } = monthOf(this.storeNow());
    return (await this.rows(runBudgetSql((n) => `$${n}`), [since, until, this.run])).map(capRow).map(lineOf);
  }

  /**
   * Of the companies this run reused, how many the account would have paid for again without the store, once per input: bought before
   * this run by a run ended by then on another input (or imported), and not already reused by an earlier real run of this input since.
   * So a resume, a concurrent run's purchase or a daily cron over one file claims nothing.
   */
  async savedAmong(companies: readonly string[]): Promise<number> {
    if (this.run === null || companies.length === 0) return 0;
    const [among, list] = this.among('c.domain', 2, companies, 'text');
    const [row] = await this.rows(
      `SELECT count(*) AS n FROM companies c JOIN runs me ON me.id = $1 LEFT JOIN runs r ON r.id = c.run
        WHERE c.service = me.service AND ${among} AND c.bought_at < me.started_at
          AND (c.run IS NULL OR (r.ended_at IS NOT NULL AND r.ended_at <= me.started_at
               AND (r.input_sha256 IS NULL OR me.input_sha256 IS NULL OR r.input_sha256 <> me.input_sha256)))
          AND NOT EXISTS (SELECT 1 FROM runs e WHERE e.service = me.service AND e.input_sha256 = me.input_sha256
               AND e.id < me.id AND e.dry_run = 0 AND e.started_at > c.bought_at)`,
      [this.run, list],
    );
    return num(row?.[0]);
  }

  /** Whether this run's lease may have lapsed (heartbeat.ts): then it must claim again before it sends. */
  leaseLapsed(): boolean {
    return this.heartbeat.lapsed();
  }

  leaseEpoch(): number {
    return this.heartbeat.epoch;
  }

  renewLease(): Promise<void> {
    return this.heartbeat.renew();
  }
}
