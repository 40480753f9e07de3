import type { CompanyRecord } from '../api/types.js';
import { budgetLinesSql, budgetView, monthOf, serviceMonthSql, type BudgetView } from './budget.js';
import type { JournalTarget } from './import-journal.js';
import type { HeldRecord, Pruned, RunRow, ServiceHoldings, Spend, SpendBy } from './ledger-types.js';
import type { RunsUnderWay } from './types.js';

/**
 * The reads both stores answer alike, written once: `$n` placeholders (SQLite's text through `sqliteText`), every column named,
 * and rows taken as arrays in column order (a team store's row through Object.values).
 */

/** A count or sum as read (pg gives bigint sums as text); missing is 0. */
export const num = (v: unknown): number => Number(v ?? 0);
/** A nullable number as read. */
export const numOrNull = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));

/** The same text with SQLite's numbered placeholders (`?1` for `$1`). */
export const sqliteText = (text: string): string => text.replace(/\$(\d+)/g, '?$1');

/** An open purchase whose paid call may have been charged without an answer seen. */
export const AT_RISK = "p.outcome = 'open' AND (p.intent_key IS NOT NULL OR p.uncertain = 1)";

export const HOLDINGS = `SELECT s.name,
   (SELECT count(*) FROM companies c WHERE c.service = s.id) AS companies,
   (SELECT count(*) FROM lookups l WHERE l.service = s.id) AS lookups,
   (SELECT count(*) FROM lookups l WHERE l.service = s.id AND l.status = 'miss') AS misses,
   (SELECT coalesce(sum(credits), 0) FROM purchases p WHERE p.service = s.id) AS credits,
   (SELECT count(*) FROM runs r WHERE r.service = s.id) AS runs,
   (SELECT count(*) FROM purchases p WHERE p.service = s.id AND ${AT_RISK}) AS open,
   (SELECT coalesce(sum(unconfirmed), 0) FROM purchases p WHERE p.service = s.id) AS unconfirmed,
   (SELECT min(bought_at) FROM companies c WHERE c.service = s.id) AS oldest,
   (SELECT max(bought_at) FROM companies c WHERE c.service = s.id) AS newest
 FROM services s ORDER BY s.id`;

export const holdingOf = (r: readonly unknown[]): ServiceHoldings => ({
  service: String(r[0]),
  companies: num(r[1]),
  lookups: num(r[2]),
  misses: num(r[3]),
  credits: num(r[4]),
  runs: num(r[5]),
  open: num(r[6]),
  unconfirmed: num(r[7]),
  oldest: numOrNull(r[8]),
  newest: numOrNull(r[9]),
});

/**
 * The $1 most recent runs, newest first; credits summed from the purchases each closed, so a killed run still counts right.
 * `beating`: whether run r's heartbeat is within its lease, or NULL where the store does not judge it.
 */
export const runsSql = (beating: string): string =>
  `SELECT r.id, s.name, r.started_at, r.ended_at, r.input_name, r.rows, r.dry_run, r.status, r.host, r."user", r.reused,
     (SELECT coalesce(sum(credits), 0) FROM purchases p WHERE p.run = r.id) AS credits,
     (SELECT count(*) FROM purchases p WHERE p.run = r.id AND p.outcome = 'hit') AS bought,
     ${beating} AS beating
   FROM runs r JOIN services s ON s.id = r.service ORDER BY r.id DESC LIMIT $1`;

const runStatus = (status: string, ended: unknown, beating: unknown): string => {
  if (status !== 'running' || ended !== null) return status;
  // A heartbeat (the team store's clock) tells a run under way from one that ended unrecorded, whose claims are free to take.
  return beating === null ? 'running or killed' : beating === true || beating === 1 ? 'running' : 'gone (killed, or lost the store)';
};

export const runOf = (r: readonly unknown[]): RunRow => ({
  id: num(r[0]),
  service: String(r[1]),
  startedAt: num(r[2]),
  endedAt: numOrNull(r[3]),
  input: r[4] === null ? null : String(r[4]),
  rows: numOrNull(r[5]),
  dryRun: num(r[6]) === 1,
  status: runStatus(String(r[7]), r[3], r[13]),
  host: String(r[8]),
  user: r[9] === null || r[9] === '' ? null : String(r[9]),
  reused: num(r[10]),
  credits: num(r[11]),
  bought: num(r[12]),
});

/** A held record's row (service, bought_at, credits, generation, record): null for a damaged one, which is passed over. */
export function heldOf(service: unknown, boughtAt: unknown, credits: unknown, generation: unknown, text: unknown): HeldRecord | null {
  let record: CompanyRecord;
  try {
    record = JSON.parse(String(text)) as CompanyRecord;
  } catch {
    return null;
  }
  if (record === null || typeof record !== 'object' || typeof record.domain !== 'string') return null;
  return { service: String(service), boughtAt: num(boughtAt), credits: num(credits), generation: num(generation), record };
}

/**
 * `enrich ledger spend`'s three reads: by month (UTC; `month` is the store's SQL of p.closed_at's YYYY-MM), person (user@host of the
 * closing run) or input, credits and apart keys retired as possibly charged; what open purchases may yet cost; companies bought.
 */
export function spendSql(by: SpendBy, month: string): [string, string, string] {
  const group = {
    month,
    person: `CASE WHEN r.id IS NULL THEN NULL ELSE coalesce(nullif(r."user", '') || '@', '') || r.host END`,
    input: `CASE WHEN r.id IS NULL THEN NULL ELSE coalesce(r.input_name, '-') END`,
  }[by];
  const ofService = 'FROM purchases p JOIN services s ON s.id = p.service';
  return [
    `SELECT s.name, ${group} AS g, coalesce(sum(p.credits), 0) AS credits, count(*) FILTER (WHERE p.outcome = 'hit') AS bought,
       coalesce(sum(p.unconfirmed), 0) AS unconfirmed
     ${ofService} LEFT JOIN runs r ON r.id = p.run WHERE p.closed_at IS NOT NULL GROUP BY s.id, s.name, g ORDER BY s.id, g`,
    `SELECT s.name, count(*) FILTER (WHERE ${AT_RISK}) AS purchases, coalesce(sum(p.unconfirmed), 0) AS unconfirmed
     ${ofService} WHERE p.outcome = 'open' GROUP BY s.id, s.name ORDER BY s.id`,
    `SELECT s.name, count(DISTINCT p.domain) AS n ${ofService} WHERE p.closed_at IS NOT NULL AND p.outcome = 'hit' GROUP BY s.id, s.name`,
  ];
}

export const spendOf = ([rows, open, companies]: unknown[][][]): Spend => ({
  companies: companies!.map((r) => ({ service: String(r[0]), companies: num(r[1]) })),
  rows: rows!.map((r) => ({ service: String(r[0]), group: r[1] === null ? null : String(r[1]), credits: num(r[2]), bought: num(r[3]), unconfirmed: num(r[4]) })),
  open: open!.map((r) => ({ service: String(r[0]), purchases: num(r[1]), unconfirmed: num(r[2]) })).filter((o) => o.purchases > 0 || o.unconfirmed > 0),
});

/** What a prune before $1 removes, table by table (`SELECT count(*) FROM` or `DELETE FROM` each). Open purchases are never pruned. */
export const PRUNED: Record<keyof Pruned, string> = {
  companies: 'companies WHERE bought_at < $1',
  lookups: 'lookups WHERE checked_at < $1',
  purchases: "purchases WHERE outcome <> 'open' AND coalesce(closed_at, opened_at) < $1",
};

/**
 * ServiceStore.otherRuns: the service's ($1) runs under way other than $2, all of them and the newest id (`known` null), or those
 * after $3 and those `known` says (the store's SQL of "id is among $4").
 */
export function otherRunsSql(known: string | null): string {
  const peer = `service = $1 AND status = 'running' AND id <> $2`;
  return `SELECT id, ${peer} AS peer FROM runs WHERE ${known === null ? `${peer} OR id = (SELECT max(id) FROM runs)` : `id > $3 OR ${known}`}`;
}

export const underWay = (rows: readonly unknown[][], after: number | null): RunsUnderWay => ({
  under: rows.filter((r) => r[1] === true || r[1] === 1).map((r) => num(r[0])),
  last: Math.max(after ?? 0, ...rows.map((r) => num(r[0]))),
});

/** What both backends' ledgers (LedgerStore) answer alike, from the reads above. */
export abstract class SqlLedger implements JournalTarget {
  abstract readonly now: () => number;
  /** Where a journal's import goes: the store itself. */
  protected abstract readonly journal: JournalTarget;
  /** The store's SQL of whether run r's heartbeat is within its lease (runsSql's `beating`). */
  protected abstract readonly beating: string;
  /** The store's SQL of p.closed_at's month, YYYY-MM in UTC. */
  protected abstract readonly month: string;
  /** One read: rows as arrays in column order. */
  protected abstract rows(text: string, params?: readonly unknown[]): Promise<unknown[][]>;

  async holdings(): Promise<ServiceHoldings[]> {
    return (await this.rows(HOLDINGS)).map(holdingOf);
  }

  async runs(limit: number): Promise<RunRow[]> {
    return (await this.rows(runsSql(this.beating), [limit])).map(runOf);
  }

  async spend(by: SpendBy): Promise<Spend> {
    const reads: unknown[][][] = [];
    for (const text of spendSql(by, this.month)) reads.push(await this.rows(text));
    return spendOf(reads);
  }

  async budget(): Promise<BudgetView> {
    const now = this.now();
    const { since, until } = monthOf(now);
    const read = (text: string): Promise<unknown[][]> => this.rows(text, [since, until]);
    return budgetView(now, await read(budgetLinesSql((n) => `$${n}`)), await read(serviceMonthSql((n) => `$${n}`)));
  }

  importedBytes(path: string): Promise<number | null> {
    return this.journal.importedBytes(path);
  }

  importer(service: string): ReturnType<JournalTarget['importer']> {
    return this.journal.importer(service);
  }

  markImported(path: string, bytes: number, companies: number): Promise<void> {
    return this.journal.markImported(path, bytes, companies);
  }
}
