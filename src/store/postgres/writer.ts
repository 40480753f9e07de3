import type pg from 'pg';
import type { Claim, EnrichEvent, HeldCompany, IntentEvent, MatchEvent, Purchase, ReleaseEvent, StoreEvent, UnclaimEvent } from '../types.js';
import { ENRICH_PRICE, monthOf } from '../budget.js';
import { BUDGET_LOCKS, CLAIM_SQL, type ClaimRow } from './claim-sql.js';
import { IDLE_IN_TRANSACTION_MS } from './connect.js';

/** Outcomes, releases and unclaims are announced on this channel, in the transaction that writes them. */
export const OUTCOME_CHANNEL = 'enrich_outcomes';
/** A run on another host whose heartbeat (server clock) has not moved for this long is taken for dead. */
export const LEASE_MS = 45_000;

export const OK: Claim = { kind: 'ok' };

/** A claim as the writer found it: for a busy one, the holder, so a dead process of this host can be told apart. */
export interface Claimed {
  claim: Claim;
  holder?: { run: number; pid: number; host: string; boot: string | null; startedAt: number };
}

interface Statement {
  text: string;
  values: unknown[];
  /** Reads the statement's rows into the batch's claims. */
  read?: (rows: ClaimRow[]) => void;
  /** Planned for its own arrays each time, never prepared: a join of purchases to the batch's arrays. */
  custom?: true;
}

/**
 * The statements a batch sends alike whatever its size are prepared once a connection, by name
 * (node-pg keeps them per connection): parsed and planned for every batch, the claim's alone took
 * 1.4 ms to plan, and the server 1.6 CPU-s of a 20,000-domain run (1.15 named). The updates of
 * purchases joined to a batch's arrays are planned for each batch instead (`custom`): a generic
 * plan takes the arrays for 10 elements, and for 2,000 outcomes rescanned the array once per
 * purchase read (1.3 s a batch; 5,000: 8 s), where a plan made for the batch hashes it (20 ms).
 * Named statements need the same session from one transaction to the next: behind a pooler in
 * transaction mode (or once one is found to lose them) a batch sends every statement unnamed.
 * Names carry this process's own prefix, so two clients a pooler puts on one server session never
 * take each other's statement.
 */
const names = new Map<string, string>();
const PREFIX = `enrich_${Buffer.from(globalThis.crypto.getRandomValues(new Uint8Array(4))).toString('hex')}_`;
function statementName(text: string): string {
  let name = names.get(text);
  if (name === undefined) {
    name = `${PREFIX}${names.size}`;
    names.set(text, name);
  }
  return name;
}

/** How many purchases a writer writes between two looks at the store's statistics. */
export const STATISTICS_EVERY = 1_000;

/**
 * Gathers the statistics of a store that has none yet. Until autovacuum's first analyze (a minute
 * or more off), the planner guesses every selectivity, and a claim or a read of the ledger on a
 * store of 100,000 purchases plans as if it held a handful. The writer counts the purchases it
 * writes; when it starts and every STATISTICS_EVERY of them, a look (on the run's reading
 * connection) finds a table that holds that many rows and was never analyzed, and `analyze` runs
 * on a connection of its own, skipping a table another session holds (autovacuum, a VACUUM): no
 * batch ever waits on either. Each table once, whether or not the role may (without the right,
 * PostgreSQL only warns); after that autovacuum keeps them.
 */
export class Statistics {
  private due = 0;
  private readonly left = new Set(['purchases', 'companies']);
  private pending: Promise<void> | null = null;
  private stopped = false;

  constructor(
    private readonly look: (text: string) => Promise<{ rows: Record<string, unknown>[] }>,
    private readonly analyze: (text: string) => Promise<unknown>,
  ) {}

  /** `count` purchases were just written. Never waited on; a failure costs the look, nothing else. */
  written(count: number): void {
    if (this.left.size === 0 || this.pending !== null || this.stopped) return;
    this.due -= count;
    if (this.due > 0) return;
    this.due = STATISTICS_EVERY;
    this.pending = this.check()
      .catch(() => {})
      .finally(() => {
        this.pending = null;
      });
  }

  /** Starts no look from now on; resolves once none is under way. */
  async stop(): Promise<void> {
    this.stopped = true;
    await this.pending;
  }

  private async check(): Promise<void> {
    const { rows } = await this.look(
      `SELECT relname, last_analyze IS NULL AND last_autoanalyze IS NULL AS never, greatest(n_live_tup, n_mod_since_analyze) AS rows
         FROM pg_stat_user_tables WHERE relid = ANY(ARRAY[to_regclass('purchases'), to_regclass('companies')])`,
    );
    const stale: string[] = [];
    for (const r of rows) {
      const name = String(r['relname']);
      if (r['never'] !== true) this.left.delete(name);
      else if (Number(r['rows']) >= STATISTICS_EVERY) stale.push(name);
    }
    if (stale.length === 0) return;
    for (const t of stale) this.left.delete(t);
    await this.analyze(`ANALYZE (SKIP_LOCKED) ${stale.join(', ')}`);
  }
}

/** The payload of a notification: the service and the company whose purchase changed. */
export const notice = (serviceId: number, domain: string): string => `${serviceId}:${domain}`;

/**
 * One group commit's statements, in the order the events came: lookups first (nothing depends on
 * them), advisory locks on every company a claim or outcome touches (in one order, so two
 * batches never deadlock), then the events as array statements, each a run of one kind in
 * which no company repeats, and a NOTIFY for every company whose purchase changed. Each joins
 * purchases on `domain = ANY(the batch's domains)` besides the join itself: on a store whose
 * statistics are not gathered yet (a new one), the planner took `service = $1` for a rare value
 * and read every purchase of the service for each batch (claim-sql.ts).
 */
export class BatchPlan {
  readonly statements: Statement[] = [];
  /** Whether the batch has taken the budgets' locks (BUDGET_LOCKS): once, before its first claim. */
  private budgetLocked = false;
  readonly claims: Claimed[];

  constructor(
    private readonly serviceId: number,
    private readonly run: number | null,
    private readonly host: string,
    events: readonly StoreEvent[],
    now: number,
    dead: readonly number[],
  ) {
    this.claims = events.map(() => ({ claim: OK }));
    this.lookups(events, now);
    const touched = new Set<string>();
    for (const e of events) if (e.type !== 'match') touched.add(e.company);
    if (touched.size > 0) {
      this.statements.push({
        text: `SELECT count(pg_advisory_xact_lock(hashtextextended($1::text || ':' || d, 0))) FROM unnest($2::text[]) WITH ORDINALITY AS u(d, n)`,
        values: [this.serviceId, [...touched].sort()],
      });
    }
    let segment: { kind: StoreEvent['type']; at: number[]; companies: Set<string> } | null = null;
    const close = (): void => {
      if (segment !== null) this.segment(segment.kind, segment.at, events, now, dead);
      segment = null;
    };
    events.forEach((e, i) => {
      if (e.type === 'match') return;
      if (segment === null || segment.kind !== e.type || segment.companies.has(e.company)) {
        close();
        segment = { kind: e.type, at: [], companies: new Set() };
      }
      segment.at.push(i);
      segment.companies.add(e.company);
    });
    close();
    const changed = [...new Set(events.filter((e) => e.type !== 'match' && e.type !== 'intent').map((e) => (e as { company: string }).company))];
    if (changed.length > 0) {
      this.statements.push({ text: `SELECT count(pg_notify($1, $2::text || ':' || d)) FROM unnest($3::text[]) AS d`, values: [OUTCOME_CHANNEL, this.serviceId, changed] });
    }
  }

  /** Every lookup of the batch, the last of each domain winning (one statement may touch a row once). */
  private lookups(events: readonly StoreEvent[], now: number): void {
    const last = new Map<string, MatchEvent>();
    for (const e of events) if (e.type === 'match' && e.status !== 'error') last.set(e.domain, e);
    if (last.size === 0) return;
    const rows = [...last.values()];
    this.statements.push({
      text: `INSERT INTO lookups (service, domain, status, company, name, checked_at)
             SELECT $1, u.* , $5::bigint FROM unnest($2::text[], $3::text[], $4::text[], $6::text[]) AS u(domain, status, company, name)
             ON CONFLICT (service, domain) DO UPDATE SET status = excluded.status, company = excluded.company, name = excluded.name, checked_at = excluded.checked_at`,
      values: [this.serviceId, rows.map((e) => e.domain), rows.map((e) => e.status), rows.map((e) => e.company ?? null), now, rows.map((e) => e.name ?? null)],
    });
  }

  private segment(kind: StoreEvent['type'], at: number[], events: readonly StoreEvent[], now: number, dead: readonly number[]): void {
    if (kind === 'intent') this.intents(at, events as readonly IntentEvent[], now, dead);
    else if (kind === 'enrich') this.outcomes(at.map((i) => events[i] as EnrichEvent), now);
    else if (kind === 'release') this.releases(at.map((i) => events[i] as ReleaseEvent));
    else if (kind === 'unclaim') this.unclaims(at.map((i) => events[i] as UnclaimEvent));
  }

  private intents(at: number[], events: readonly IntentEvent[], now: number, dead: readonly number[]): void {
    const list = at.map((i) => events[i] as IntentEvent);
    if (this.run !== null && !this.budgetLocked) {
      this.budgetLocked = true;
      this.statements.push({ text: BUDGET_LOCKS[0] as string, values: [] }, { text: BUDGET_LOCKS[1] as string, values: [this.run] });
    }
    const { since, until } = monthOf(now);
    this.statements.push({
      text: CLAIM_SQL,
      values: [
        this.serviceId,
        this.run,
        now,
        list.map((e) => e.company),
        list.map((e) => e.generation),
        list.map((e) => e.keyVersion),
        list.map((e) => e.key),
        list.map((e) => e.at ?? now),
        list.map((e) => e.freshSince !== undefined),
        list.map((e) => e.freshSince ?? null),
        dead,
        LEASE_MS,
        since,
        until,
        list.map((e) => e.price ?? ENRICH_PRICE),
      ],
      read: (rows) => {
        // One row per intent, or the batch is not what was sent: an intent left unread would
        // stand as claimed ('ok'), and a purchase another run holds would be bought again.
        if (rows.length !== list.length || !rows.every((row, k) => Number(row.ord) === k + 1 && row.domain === list[k]?.company)) {
          throw new Error(`the store answered ${list.length} claims of a committed batch with ${rows.length} rows that do not match them; their intents are kept, and no paid call went under them`);
        }
        for (const row of rows) this.claims[at[Number(row.ord) - 1] as number] = this.toClaimed(row);
      },
    });
  }

  private toClaimed(r: ClaimRow): Claimed {
    if (r.verdict === 'held') {
      const held: HeldCompany = {
        domain: r.domain,
        name: r.h_name as string,
        boughtAt: Number(r.h_bought_at),
        lastUpdated: r.h_last_updated,
        generation: Number(r.h_generation),
        credits: Number(r.h_credits),
      };
      return { claim: { kind: 'held', held } };
    }
    if (r.verdict === 'moved') return { claim: { kind: 'moved', purchase: purchaseOf(r) } };
    if (r.verdict === 'capped') return { claim: { kind: 'capped', person: r.cap_person === null || r.cap_person === '' ? null : r.cap_person, cap: Number(r.cap_credits) } };
    if (r.verdict === 'busy' || !r.written) {
      // Not written although found free: taken by another run between the read and the write.
      if (r.o_pid === null || r.p_owner_run === null) return { claim: { kind: 'busy' } };
      const pid = Number(r.o_pid);
      const host = r.o_host ?? '';
      return {
        claim: host === this.host ? { kind: 'busy', pid } : { kind: 'busy', pid, host },
        holder: { run: Number(r.p_owner_run), pid, host, boot: r.o_boot, startedAt: Number(r.o_started_at) },
      };
    }
    return { claim: r.took_over ? { kind: 'ok', tookOver: true } : OK };
  }

  private outcomes(list: EnrichEvent[], now: number): void {
    const s = this.serviceId;
    const atOf = (e: EnrichEvent): number => e.at ?? now;
    if (this.run === null) {
      // An imported journal may hold an outcome without its intent.
      this.statements.push({
        text: `INSERT INTO purchases (service, domain, generation, key_version, outcome, opened_at)
               SELECT $1, u.domain, u.generation, u.v, 'open', u.at FROM unnest($2::text[], $3::int[], $4::int[], $5::bigint[]) AS u(domain, generation, v, at)
               ON CONFLICT DO NOTHING`,
        values: [s, list.map((e) => e.company), list.map((e) => e.generation), list.map((e) => e.keyVersion), list.map(atOf)],
      });
    }
    const hits = list.filter((e) => e.status === 'hit' && e.record !== undefined);
    if (hits.length > 0) {
      this.statements.push({
        text: `INSERT INTO companies AS c (service, domain, name, record, bought_at, last_updated, idempotency_key, credits, generation, run)
               SELECT $1, u.*, $10::bigint FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[], $7::text[], $8::int[], $9::int[])
                 AS u(domain, name, record, bought_at, last_updated, idempotency_key, credits, generation)
               ON CONFLICT (service, domain) DO UPDATE SET name = excluded.name, record = excluded.record, bought_at = excluded.bought_at,
                 last_updated = excluded.last_updated, idempotency_key = excluded.idempotency_key, credits = excluded.credits,
                 generation = excluded.generation, run = excluded.run
               WHERE excluded.generation >= c.generation`,
        values: [
          s,
          hits.map((e) => e.company),
          hits.map((e) => e.record?.name),
          hits.map((e) => JSON.stringify(e.record)),
          hits.map(atOf),
          hits.map((e) => e.record?.last_updated || null),
          hits.map((e) => e.keyUsed ?? null),
          hits.map((e) => e.charged ?? 0),
          hits.map((e) => e.generation),
          this.run,
        ],
      });
    }
    const closed = list.filter((e) => e.status === 'hit' || e.status === 'miss');
    const final = list.filter((e) => e.status === 'error' && e.final === true);
    for (const [rows, outcome] of [[closed, null], [final, 'failed']] as const) {
      if (rows.length === 0) continue;
      this.statements.push({
        custom: true,
        text: `UPDATE purchases p SET outcome = u.outcome, intent_key = NULL, owner_run = NULL, credits = p.credits + u.charged, run = $2::bigint,
                 closed_at = u.at, error_code = u.code
               FROM unnest($3::text[], $4::int[], $5::text[], $6::int[], $7::bigint[], $8::text[]) AS u(domain, generation, outcome, charged, at, code)
               WHERE p.service = $1 AND p.domain = u.domain AND p.generation = u.generation AND p.domain = ANY($3::text[]) AND p.outcome = 'open'`,
        values: [s, this.run, rows.map((e) => e.company), rows.map((e) => e.generation), rows.map((e) => outcome ?? e.status), rows.map((e) => e.charged ?? 0), rows.map(atOf), rows.map((e) => (outcome === null ? null : e.code ?? 'error'))],
      });
    }
    const open = list.filter((e) => e.status === 'error' && e.final !== true);
    const retired = open.filter((e) => e.verdict === 'retired');
    if (retired.length > 0) {
      // Only the key this run sent under, on a purchase still open and still this run's: a retire
      // arriving once another run has taken the purchase over is stale (store/sqlite/writer.ts).
      this.statements.push({
        custom: true,
        text: `UPDATE purchases p SET key_version = u.v + 1, intent_key = NULL, uncertain = 0, lost_at = NULL, error_code = u.code, unconfirmed = p.unconfirmed + u.unconfirmed
               FROM unnest($3::text[], $4::int[], $5::int[], $6::text[], $7::int[]) AS u(domain, generation, v, code, unconfirmed)
               WHERE p.service = $1 AND p.domain = u.domain AND p.generation = u.generation AND p.domain = ANY($3::text[])
                 AND p.key_version = u.v AND p.outcome = 'open' AND ($2::bigint IS NULL OR p.owner_run = $2::bigint)`,
        values: [s, this.run, retired.map((e) => e.company), retired.map((e) => e.generation), retired.map((e) => e.keyVersion), retired.map((e) => e.code ?? 'error'), retired.map((e) => (e.unconfirmed === true ? 1 : 0))],
      });
    }
    const kept = open.filter((e) => e.verdict !== 'retired');
    if (kept.length > 0) {
      this.statements.push({
        custom: true,
        text: `UPDATE purchases p SET uncertain = 1, error_code = u.code, lost_at = CASE WHEN u.lost THEN u.at ELSE p.lost_at END
               FROM unnest($2::text[], $3::int[], $4::text[], $5::bool[], $6::bigint[]) AS u(domain, generation, code, lost, at)
               WHERE p.service = $1 AND p.domain = u.domain AND p.generation = u.generation AND p.domain = ANY($2::text[]) AND p.outcome = 'open'`,
        values: [s, kept.map((e) => e.company), kept.map((e) => e.generation), kept.map((e) => e.code ?? 'error'), kept.map((e) => e.lost === true), kept.map(atOf)],
      });
    }
  }

  private releases(list: ReleaseEvent[]): void {
    if (this.run === null) return;
    this.statements.push({
      custom: true,
      text: `UPDATE purchases p SET owner_run = NULL FROM unnest($3::text[], $4::int[]) AS u(domain, generation)
             WHERE p.service = $1 AND p.domain = u.domain AND p.generation = u.generation AND p.domain = ANY($3::text[]) AND p.owner_run = $2::bigint AND p.outcome = 'open'`,
      values: [this.serviceId, this.run, list.map((e) => e.company), list.map((e) => e.generation)],
    });
  }

  private unclaims(list: UnclaimEvent[]): void {
    this.statements.push({
      custom: true,
      text: `UPDATE purchases p SET intent_key = NULL, owner_run = NULL, lost_at = NULL
             FROM unnest($3::text[], $4::int[], $5::int[], $6::text[]) AS u(domain, generation, v, key)
             WHERE p.service = $1 AND p.domain = u.domain AND p.generation = u.generation AND p.domain = ANY($3::text[]) AND p.key_version = u.v AND p.intent_key = u.key
               AND p.outcome = 'open' AND p.uncertain = 0 AND ($2::bigint IS NULL OR p.owner_run = $2::bigint)`,
      values: [this.serviceId, this.run, list.map((e) => e.company), list.map((e) => e.generation), list.map((e) => e.keyVersion), list.map((e) => e.key)],
    });
  }
}

function purchaseOf(r: ClaimRow): Purchase {
  return {
    domain: r.domain,
    generation: Number(r.generation),
    keyVersion: Number(r.p_key_version),
    intentKey: r.p_intent_key,
    uncertain: Number(r.p_uncertain) === 1,
    unconfirmed: Number(r.p_unconfirmed ?? 0),
    errorCode: r.p_error_code,
    outcome: r.p_outcome ?? 'open',
    closedAt: r.p_closed_at === null ? null : Number(r.p_closed_at),
    lostAt: r.p_lost_at === null ? null : Number(r.p_lost_at),
  };
}

/**
 * An update joined to a batch's arrays is never a nested loop: on a store without statistics (a
 * new one, or one its role may not analyze, autovacuum not come yet) the planner took the
 * purchases it reads by `domain = ANY(...)` for a handful and read the whole array again for
 * each (2,000 outcomes among 100,000 purchases: 8,000,000 rows, 1.4 s). Hashed, the same rows
 * are read once, whatever the statistics; the index still finds them. Not the claim: hashed, it
 * read every run of the store for each batch (10,000 runs: 2 ms more a batch of 5); on a store
 * never analyzed it relies on Statistics.
 */
export const HASHED = 'SET LOCAL enable_nestloop = off';
const NESTED = 'SET LOCAL enable_nestloop = on';

/**
 * How long a batch waits for a company (its advisory lock, its rows) that another session holds:
 * another run's batch or a chunk of a `ledger copy` holds one for milliseconds; longer is a
 * session left open (a `psql` transaction). Then the run stops (exit 6) rather than wait out the
 * query timeout, be taken for a lost connection, and leave its statement waiting on the server.
 */
export const BATCH_LOCK_WAIT_MS = 30_000;

/**
 * Sends a batch's statements in one round trip (the client pipelines), inside one transaction,
 * and reads its claims. A deadlock or serialisation failure (another run's release, which locks
 * many rows at once) is retried; anything else rolls the batch back and throws. No wait for a lock
 * in it is longer than `lockWaitMs` (SET LOCAL: nothing is left on the session). `named`: the
 * statements that are alike for every batch go prepared by name (see statementName).
 */
export async function commitBatch(client: pg.Client, plan: BatchPlan, lockWaitMs = BATCH_LOCK_WAIT_MS, named = true): Promise<Claimed[]> {
  for (let attempt = 1; ; attempt++) {
    const sent = [
      // READ COMMITTED whatever the database's default: each statement sees what committed before
      // it, so the claim reads the caps' spend only after it holds their locks (claim-sql.ts).
      client.query('BEGIN ISOLATION LEVEL READ COMMITTED'),
      client.query(`SET LOCAL lock_timeout = ${Math.round(lockWaitMs)}`),
      // A process stopped mid-batch (a laptop's lid closed) must not hold its companies from the team.
      client.query(`SET LOCAL idle_in_transaction_session_timeout = ${IDLE_IN_TRANSACTION_MS}`),
    ];
    const at: number[] = [];
    let hashed = false;
    for (const s of plan.statements) {
      if ((s.custom === true) !== hashed) {
        hashed = !hashed;
        sent.push(client.query(hashed ? HASHED : NESTED));
      }
      at.push(sent.length);
      sent.push(client.query(s.custom === true || !named ? { text: s.text, values: s.values } : { name: statementName(s.text), text: s.text, values: s.values }));
    }
    sent.push(client.query('COMMIT'));
    const results = await Promise.allSettled(sent);
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    const commit = results[results.length - 1];
    if (failed === undefined && commit?.status === 'fulfilled' && commit.value.command === 'COMMIT') {
      plan.statements.forEach((s, i) => {
        const result = results[at[i] as number];
        if (s.read !== undefined && result?.status === 'fulfilled') s.read(result.value.rows as ClaimRow[]);
      });
      return plan.claims;
    }
    // A failed statement aborts the transaction, and COMMIT then rolls it back.
    await client.query('ROLLBACK').catch(() => {});
    const code = (failed?.reason as { code?: string } | undefined)?.code;
    if ((code === '40P01' || code === '40001') && attempt < 5) continue;
    throw failed?.reason ?? new Error('the batch was rolled back');
  }
}
