import type { MonthSpend } from '../types.js';
import type { Connection } from './connection.js';

const num = (v: unknown): number => Number(v ?? 0);

/** Credits this store saw this service spend since `since`: closed purchases plus keys retired as possibly charged. Not other tools on the account, nor rollover (spec 8.6). */
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
 * Of the companies run `runId` reused, how many the account would have paid for again without the store, once per input: bought
 * before this run by a run ended by then on another input (or imported), and not already reused by an earlier real run of this
 * input since. So a resume, a concurrent run's purchase or a daily cron over one file claims nothing.
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
