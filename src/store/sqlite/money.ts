import type { MonthSpend } from '../types.js';
import type { Connection } from './connection.js';

const num = (v: unknown): number => Number(v ?? 0);

/**
 * Credits this store saw this service's runs spend since `since` (ms): closed purchases by when
 * they closed, plus keys retired as possibly charged. It cannot see other tools on the same
 * account, nor credits rolled over from earlier months (spec 8.6): callers say so.
 */
export function creditsSince(store: Pick<Connection, 'db'>, service: string, since: number): MonthSpend {
  const row = store.db
    .prepare(
      `SELECT coalesce(sum(p.credits), 0), coalesce(sum(p.unconfirmed), 0) FROM purchases p JOIN services s ON s.id = p.service
        WHERE s.name = ? AND p.closed_at >= ?`,
    )
    .raw(true)
    .get(service, since) as [number, number] | undefined;
  return { charged: num(row?.[0]), unconfirmed: num(row?.[1]) };
}

/**
 * Of `domains` (companies run `runId` reused from the store), how many this account would have paid
 * for again without the store, each claimed once per input: bought before this run started, by a
 * run that had ended by then on another input (or imported from enrich 0.1), and not reused already
 * by an earlier real run of this same input since that purchase. So a resume after Ctrl-C, a
 * concurrent run's purchase, and a daily cron over one file claim nothing; next month's re-export
 * claims what last month's bought, once.
 */
export function savedAmong(store: Pick<Connection, 'db'>, runId: number, domains: readonly string[]): number {
  if (domains.length === 0) return 0;
  const row = store.db
    .prepare(
      `SELECT count(*) FROM companies c JOIN runs me ON me.id = ? LEFT JOIN runs r ON r.id = c.run
        WHERE c.service = me.service AND c.domain IN (SELECT value FROM json_each(?)) AND c.bought_at < me.started_at
          AND (c.run IS NULL OR (r.ended_at IS NOT NULL AND r.ended_at <= me.started_at
               AND (r.input_sha256 IS NULL OR me.input_sha256 IS NULL OR r.input_sha256 <> me.input_sha256)))
          AND NOT EXISTS (SELECT 1 FROM runs e WHERE e.service = me.service AND e.input_sha256 = me.input_sha256
               AND e.id < me.id AND e.dry_run = 0 AND e.started_at > c.bought_at)`,
    )
    .raw(true)
    .get(runId, JSON.stringify(domains)) as [number] | undefined;
  return num(row?.[0]);
}
