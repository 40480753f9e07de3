import { runBudgetSql } from '../budget.js';
import { NOW_MS } from './schema.js';

/**
 * The claim, for many intents in one statement: SQLite's RecordWriter.claim, rule for rule, as
 * SQL. `decided` reads what the store holds and says what each intent found; the INSERT writes
 * the intents found free, and its ON CONFLICT ... DO UPDATE ... WHERE takes a purchase over only
 * while it is still open under the same key and its holder's lease has lapsed (judged by the
 * server's clock), so a claim never overwrites one taken since. The batch's advisory locks
 * (writer.ts) already serialise every claim and outcome of one company; the WHERE is the second
 * guard. Parameters:
 *   $1 service, $2 this run (null: no run), $3 now (ms, this host: opened_at),
 *   $4 domains, $5 generations, $6 key versions, $7 keys, $8 lost_at (ms),
 *   $9 whether a freshness rule was given, $10 fresh since (ms; null: any record held),
 *   $11 runs known dead (another process of this host that is gone), $12 the lease (ms),
 *   $13 and $14 this month by the store's clock (ms: since, until), $15 each intent's price.
 * A new reservation under the monthly caps (store/budget.ts) is decided as decideClaim does: an
 * intent whose purchase no attempt may have gone under yet takes its price from the tightest cap's
 * room, in order; one it does not fit is 'capped' and not written. BUDGET_LOCKS, sent before it
 * in the batch, serialises every claim under a cap, across machines.
 * One row per intent, in order, with the verdict, the company held, the purchase as it was, and
 * the holder of a busy one.
 */
/**
 * Whether run row `r` is alive: under way, its heartbeat within the lease by the server's clock,
 * and not one of the runs known dead (`dead`: an array of run ids). Every liveness judgement of
 * the team store (claims, the ledger's release and prune, copies) is this one.
 */
export const RUN_ALIVE = (r: string, dead: string, lease: string): string =>
  `(${r}.status = 'running' AND coalesce(${r}.heartbeat_at, 0) >= ${NOW_MS} - ${lease} AND ${r}.id <> ALL(${dead}::bigint[]))`;

const ALIVE = (run: string): string => `EXISTS (SELECT 1 FROM runs r WHERE r.id = ${run} AND ${RUN_ALIVE('r', '$11', '$12::bigint')})`;

export const CLAIM_SQL = `
WITH input AS (
  SELECT * FROM unnest($4::text[], $5::int[], $6::int[], $7::text[], $8::bigint[], $9::bool[], $10::bigint[], $15::int[])
    WITH ORDINALITY AS i(domain, generation, key_version, intent_key, lost_at, has_fresh, fresh_since, price, ord)
),
me AS (SELECT r."user" AS person FROM runs r WHERE r.id = $2::bigint),
caps AS (SELECT * FROM (${runBudgetSql((n) => (n === 1 ? '$13::bigint' : n === 2 ? '$14::bigint' : '$2::bigint'))}) c WHERE $2::bigint IS NOT NULL),
room AS (SELECT c.person, c.credits AS cap, c.credits - c.spent - c.held AS room_left FROM caps c ORDER BY 3, 1 LIMIT 1),
found AS (
  SELECT i.*, h.name AS h_name, h.bought_at AS h_bought_at, h.last_updated AS h_last_updated, h.generation AS h_generation, h.credits AS h_credits,
    p.domain IS NOT NULL AS p_exists, p.key_version AS p_key_version, p.intent_key AS p_intent_key, p.uncertain AS p_uncertain, p.unconfirmed AS p_unconfirmed,
    p.error_code AS p_error_code, p.outcome AS p_outcome, p.closed_at AS p_closed_at, p.owner_run AS p_owner_run, p.lost_at AS p_lost_at,
    o.pid AS o_pid, o.host AS o_host, o.boot AS o_boot, o.started_at AS o_started_at,
    (p.owner_run IS NOT NULL AND ${ALIVE('p.owner_run')}) AS o_alive
  FROM input i
  -- domain = ANY($4) as well: without it, on a store whose statistics are not yet gathered (a new
  -- one, its first minute), the planner took service = $1 for a rare value and read every
  -- purchase of the service for each batch, a run slowing as it bought.
  LEFT JOIN companies h ON h.service = $1 AND h.domain = i.domain AND h.domain = ANY($4::text[])
  LEFT JOIN purchases p ON p.service = $1 AND p.domain = i.domain AND p.generation = i.generation AND p.domain = ANY($4::text[])
  LEFT JOIN runs o ON o.id = p.owner_run
),
decided AS (
  SELECT f.*, CASE
    WHEN f.h_generation >= f.generation THEN 'held'
    -- Held fresh: never bought again, unless a key of it may have been charged (only that key can recover it for free).
    WHEN f.h_generation IS NOT NULL AND f.has_fresh AND (f.fresh_since IS NULL OR f.h_bought_at >= f.fresh_since)
      AND NOT (f.p_exists AND f.p_outcome = 'open' AND (f.p_intent_key IS NOT NULL OR f.p_uncertain = 1)) THEN 'held'
    WHEN f.p_exists AND f.p_outcome = 'open' AND f.p_owner_run IS NOT NULL AND f.p_owner_run IS DISTINCT FROM $2::bigint AND f.o_alive THEN 'busy'
    WHEN f.p_exists AND (f.p_outcome <> 'open' OR f.p_key_version <> f.key_version OR (f.p_intent_key IS NOT NULL AND f.p_intent_key <> f.intent_key)) THEN 'moved'
    ELSE 'ok' END AS verdict,
    (f.p_exists AND f.p_intent_key IS NOT NULL AND f.p_owner_run IS DISTINCT FROM $2::bigint) AS took_over,
    -- A purchase an attempt may already have gone under holds its reservation still.
    NOT (f.p_exists AND f.p_outcome = 'open' AND (f.p_intent_key IS NOT NULL OR f.p_uncertain = 1)) AS reserves
  FROM found f
),
budgeted AS (
  SELECT d.*, rm.person AS cap_person, rm.cap AS cap_credits,
    CASE WHEN d.verdict = 'ok' AND d.reserves AND rm.room_left IS NOT NULL
      AND sum(CASE WHEN d.verdict = 'ok' AND d.reserves THEN d.price ELSE 0 END) OVER (ORDER BY d.ord) > rm.room_left THEN 'capped'
      ELSE d.verdict END AS final
  FROM decided d LEFT JOIN room rm ON true
),
written AS (
  INSERT INTO purchases AS p (service, domain, generation, key_version, intent_key, outcome, owner_run, opened_at, lost_at, person, reserved)
  SELECT $1, d.domain, d.generation, d.key_version, d.intent_key, 'open', $2::bigint, $3::bigint, d.lost_at,
    CASE WHEN d.reserves THEN (SELECT person FROM me) END, CASE WHEN d.reserves THEN d.price ELSE 0 END
  FROM budgeted d WHERE d.final = 'ok'
  ON CONFLICT (service, domain, generation) DO UPDATE SET
    key_version = excluded.key_version, intent_key = excluded.intent_key, outcome = 'open', owner_run = excluded.owner_run,
    lost_at = greatest(coalesce(p.lost_at, 0), excluded.lost_at),
    person = CASE WHEN excluded.reserved > 0 THEN excluded.person ELSE p.person END,
    reserved = CASE WHEN excluded.reserved > 0 THEN excluded.reserved ELSE p.reserved END
  WHERE p.outcome = 'open' AND p.key_version = excluded.key_version AND (p.intent_key IS NULL OR p.intent_key = excluded.intent_key)
    AND (p.owner_run IS NULL OR p.owner_run IS NOT DISTINCT FROM $2::bigint OR NOT ${ALIVE('p.owner_run')})
  RETURNING p.domain
)
SELECT d.ord, d.domain, d.final AS verdict, d.took_over, d.domain IN (SELECT domain FROM written) AS written, d.cap_person, d.cap_credits,
  d.h_name, d.h_bought_at, d.h_last_updated, d.h_generation, d.h_credits,
  d.generation, d.p_key_version, d.p_intent_key, d.p_uncertain, d.p_unconfirmed, d.p_error_code, d.p_outcome, d.p_closed_at, d.p_lost_at,
  d.p_owner_run, d.o_pid, d.o_host, d.o_boot, d.o_started_at
FROM budgeted d
ORDER BY d.ord`;

/**
 * Sent before a batch's claims: every claim takes the budgets' shared lock (a cap being set takes
 * it alone, budgetSet), then the lock of each cap that applies to its run, in one order. The claim
 * statement after them reads what is spent and held under each cap only once no other claim under
 * it is in flight. Advisory locks: a role that may not change the caps (GRANT SELECT on budgets
 * only) still claims. $1: the run.
 */
export const BUDGETS_LOCK = 0x656e72696362; // beside MAINTENANCE_LOCK
export const BUDGET_LOCKS = [
  `SELECT pg_advisory_xact_lock_shared(${BUDGETS_LOCK})`,
  `SELECT count(pg_advisory_xact_lock(hashtextextended('enrich budget:' || b.person, 0)))
     FROM (SELECT person FROM budgets WHERE person = '' OR person = (SELECT r."user" FROM runs r WHERE r.id = $1::bigint) ORDER BY person) b`,
];

export interface ClaimRow {
  ord: number;
  domain: string;
  verdict: 'ok' | 'held' | 'busy' | 'moved' | 'capped';
  took_over: boolean;
  cap_person: string | null;
  cap_credits: number | null;
  written: boolean;
  h_name: string | null;
  h_bought_at: number | null;
  h_last_updated: string | null;
  h_generation: number | null;
  h_credits: number | null;
  generation: number;
  p_key_version: number | null;
  p_intent_key: string | null;
  p_uncertain: number | null;
  p_unconfirmed: number | null;
  p_error_code: string | null;
  p_outcome: 'open' | 'hit' | 'miss' | 'failed' | null;
  p_closed_at: number | null;
  p_lost_at: number | null;
  p_owner_run: number | null;
  o_pid: number | null;
  o_host: string | null;
  o_boot: string | null;
  o_started_at: number | null;
}
