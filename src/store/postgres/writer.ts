import type pg from 'pg';
import type { Claim, HeldCompany, MatchEvent, StoreEvent } from '../types.js';
import { capRow, monthOf, runBudgetSql, type CapRow } from '../budget.js';
import { decideBatch, type BatchDecision, type BatchReader, type KeptPurchase } from '../purchase.js';
import { toKept } from '../copy.js';
import { CONFLICT_RETRIES, IDLE_IN_TRANSACTION_MS, isRetryableConflict } from './connect.js';
import { NOW_MS } from './schema.js';
import { storeIdOf } from './inspect.js';

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

export interface Statement {
  text: string;
  values: unknown[];
  /** Reads the statement's rows into what the batch knows. */
  read?: (rows: Record<string, unknown>[]) => void;
}

/**
 * Each batch statement is prepared once per connection, by name (arrays make them alike at any size), rather than planned per batch.
 * Behind a transaction-mode pooler batches go unnamed; the per-process prefix keeps two clients on one server session apart.
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
 * Analyzes tables never analyzed yet: until autovacuum's first analyze, the planner plans a big store as a handful of rows. Looked at
 * every STATISTICS_EVERY purchases; ANALYZE (SKIP_LOCKED) runs on its own connection, so no batch waits on it.
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

/** Whether run row `r` is alive: running, heartbeat within the lease by the server's clock, and not in `dead`. Every team-store liveness judgement is this one. */
export const RUN_ALIVE = (r: string, dead: string, lease: string): string =>
  `(${r}.status = 'running' AND coalesce(${r}.heartbeat_at, 0) >= ${NOW_MS} - ${lease} AND ${r}.id <> ALL(${dead}::bigint[]))`;

/**
 * Claims take the budgets' shared lock (setting a cap takes it alone), then each applicable cap's lock in one order, so caps are
 * read only when no other claim under them is in flight. Advisory, so a role that may only SELECT budgets still claims. $1: the run.
 */
export const BUDGETS_LOCK = 0x656e72696362; // beside MAINTENANCE_LOCK
const BUDGET_LOCKS = [
  `SELECT pg_advisory_xact_lock_shared(${BUDGETS_LOCK})`,
  `SELECT count(pg_advisory_xact_lock(hashtextextended('enrich budget:' || b.person, 0)))
     FROM (SELECT person FROM budgets WHERE person = '' OR person = (SELECT r."user" FROM runs r WHERE r.id = $1::bigint) ORDER BY person) b`,
];

/**
 * A batch's purchases with holders and liveness ($1 service, $2 domains, $3 dead runs, $4 lease). Not FOR UPDATE: every write of an
 * open purchase holds its company's advisory lock, taken before this read (a run's own end-of-run release only clears owner_run).
 */
const READ_PURCHASES = `
SELECT p.domain, p.generation, p.key_version, p.intent_key, p.uncertain, p.unconfirmed, p.error_code, p.outcome, p.closed_at, p.owner_run, p.lost_at, p.settle_ms,
  p.credits, p.run, p.opened_at, p.person, p.reserved, p.resumed, o.pid, o.host, o.boot, o.started_at, (o.id IS NOT NULL AND ${RUN_ALIVE('o', '$3', '$4::bigint')}) AS alive
FROM purchases p LEFT JOIN runs o ON o.id = p.owner_run
WHERE p.service = $1 AND p.domain = ANY($2::text[])`;
const READ_HOLDINGS = `SELECT domain, name, bought_at, last_updated, generation, credits FROM companies WHERE service = $1 AND domain = ANY($2::text[])`;
/** The caps that apply to run $3 with what each has spent and held in the month [$1, $2), and who the run is counted under. */
const READ_CAPS = runBudgetSql((n) => (n === 1 ? '$1::bigint' : n === 2 ? '$2::bigint' : '$3::bigint'));
const READ_PERSON = `SELECT "user" AS person FROM runs WHERE id = $1::bigint`;
/** Fails the batch (CAPS_MOVED) when what it adds no longer fits a cap's room ($4 store, $5 person; month [$1, $2), run $3) as read under the budgets' locks. */
const CAPS_STILL_FIT = `
SELECT 1 / (CASE WHEN EXISTS (
  SELECT 1 FROM (${runBudgetSql((n) => (n === 1 ? '$1::bigint' : n === 2 ? '$2::bigint' : '$3::bigint'))}) c
  WHERE c.credits - c.spent - c.held < (CASE WHEN c.person = '' THEN $4::int ELSE $5::int END)
) THEN 0 ELSE 1 END) AS fits`;
/** What CAPS_STILL_FIT and EPOCH_STILL fail with: the batch is decided again under the budgets' locks. */
const CAPS_MOVED = '22012';
const READ_STORE_ID = `SELECT key, value FROM meta WHERE key IN ('store_id', 'key_epoch')`;
/** Fails the batch (CAPS_MOVED) when a prune moved the key epoch on since the batch read it as $1 (the store id with its epoch). */
const EPOCH_STILL = `
SELECT 1 / (CASE WHEN (SELECT max(value) FILTER (WHERE key = 'store_id') || coalesce('.' || nullif(max(value) FILTER (WHERE key = 'key_epoch'), '0'), '')
  FROM meta WHERE key IN ('store_id', 'key_epoch')) IS NOT DISTINCT FROM $1::text THEN 1 ELSE 0 END) AS same`;

const WRITE_PURCHASES = `
INSERT INTO purchases AS p (service, domain, generation, key_version, intent_key, uncertain, unconfirmed, error_code, lost_at, settle_ms, outcome, credits, owner_run, run, opened_at, closed_at, person, reserved, resumed)
SELECT $1, u.* FROM unnest($2::text[], $3::int[], $4::int[], $5::text[], $6::int[], $7::int[], $8::text[], $9::bigint[], $10::bigint[], $11::text[], $12::int[], $13::bigint[], $14::bigint[], $15::bigint[], $16::bigint[], $17::text[], $18::int[], $19::int[])
  AS u(domain, generation, key_version, intent_key, uncertain, unconfirmed, error_code, lost_at, settle_ms, outcome, credits, owner_run, run, opened_at, closed_at, person, reserved, resumed)
ON CONFLICT (service, domain, generation) DO UPDATE SET
  key_version = excluded.key_version, intent_key = excluded.intent_key, uncertain = excluded.uncertain, unconfirmed = excluded.unconfirmed,
  error_code = excluded.error_code, lost_at = excluded.lost_at, settle_ms = excluded.settle_ms, outcome = excluded.outcome, credits = excluded.credits,
  owner_run = excluded.owner_run, run = excluded.run, closed_at = excluded.closed_at, person = excluded.person, reserved = excluded.reserved, resumed = excluded.resumed`;
const WRITE_RECORDS = `
INSERT INTO companies AS c (service, domain, name, record, bought_at, last_updated, idempotency_key, credits, generation, run)
SELECT $1, u.*, $10::bigint FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[], $7::text[], $8::int[], $9::int[])
  AS u(domain, name, record, bought_at, last_updated, idempotency_key, credits, generation)
ON CONFLICT (service, domain) DO UPDATE SET name = excluded.name, record = excluded.record, bought_at = excluded.bought_at,
  last_updated = excluded.last_updated, idempotency_key = excluded.idempotency_key, credits = excluded.credits,
  generation = excluded.generation, run = excluded.run
WHERE excluded.generation > c.generation OR (excluded.generation = c.generation AND excluded.bought_at >= c.bought_at)`;

type Row = Record<string, unknown>;
const num = (v: unknown): number => Number(v);

/** Who holds a purchase: a busy claim names them, and a process of this host that is gone is told apart (records.ts). */
type Holder = NonNullable<Claimed['holder']>;

/** What the batch's first round trip read (under its locks), as decideBatch asks for it. */
class PgBatchRead implements BatchReader {
  readonly kept = new Map<string, KeptPurchase>();
  readonly held = new Map<string, HeldCompany>();
  readonly holders = new Map<number, Holder & { alive: boolean }>();
  capRows: CapRow[] = [];
  runPerson: string | null = null;
  /** The store id with its key epoch as the batch read it, and as its run began (null: an import, asked nothing). */
  storeIdNow: string | null = null;
  runStoreId: string | null = null;

  pruned(): boolean {
    return this.runStoreId !== null && this.storeIdNow !== null && this.storeIdNow !== this.runStoreId;
  }

  purchase(domain: string, generation: number): KeptPurchase | null {
    return this.kept.get(`${generation} ${domain}`) ?? null;
  }

  holding(domain: string): HeldCompany | null {
    return this.held.get(domain) ?? null;
  }

  caps(): CapRow[] {
    return this.capRows;
  }

  person(): string | null {
    return this.runPerson;
  }

  alive(run: number): boolean {
    return this.holders.get(run)?.alive === true;
  }
}

/**
 * One group commit: one transaction, two round trips. First: lookups, advisory locks on every touched company (sorted, so batches never
 * deadlock) and what decideBatch reads. Second: its writes, a notify per company an outcome, release or unclaim changed, and COMMIT.
 */
export class BatchPlan {
  /** Every company a claim or outcome touches. */
  private readonly companies: string[];
  private readonly claims: boolean;

  constructor(
    readonly serviceId: number,
    readonly run: number | null,
    private readonly host: string,
    readonly events: readonly StoreEvent[],
    /** The store's time, or each event's own (an imported journal's past, as decideBatch takes it). */
    readonly now: number | readonly number[],
    private readonly dead: readonly number[],
    /** The store id with the key epoch this run began under: a prune since refuses its new keys. */
    private readonly runStoreId: string | null = null,
    /** An import's: the store's clock (its events carry their own times). */
    private readonly storeNow: number | null = null,
  ) {
    const touched = new Set<string>();
    for (const e of events) if (e.type !== 'match') touched.add(e.company);
    this.companies = [...touched].sort();
    this.claims = run !== null && events.some((e) => e.type === 'intent');
  }

  /** Whether the batch needs the rule (anything but lookups): a second round trip. */
  get decides(): boolean {
    return this.companies.length > 0;
  }

  /** The first round trip: lookups, locks, and what the rule reads. `locked`: the budgets' locks are taken before the caps are read. */
  first(locked: boolean): Statement[] {
    const out: Statement[] = [];
    // The newest of each domain (the last, at one time): one statement may touch a row once.
    const last = new Map<string, [MatchEvent, number]>();
    this.events.forEach((e, i) => {
      const at = typeof this.now === 'number' ? this.now : (this.now[i] as number);
      if (e.type === 'match' && e.status !== 'error' && at >= (last.get(e.domain)?.[1] ?? at)) last.set(e.domain, [e, at]);
    });
    if (last.size > 0) {
      const rows = [...last.values()];
      out.push({
        text: `INSERT INTO lookups (service, domain, status, company, name, checked_at)
               SELECT $1, u.* FROM unnest($2::text[], $3::text[], $4::text[], $6::text[], $5::bigint[]) AS u(domain, status, company, name, checked_at)
               ON CONFLICT (service, domain) DO UPDATE SET status = excluded.status, company = excluded.company, name = excluded.name, checked_at = excluded.checked_at${
                 // An import's past never replaces a newer lookup; a run's answer is the newest there is.
                 typeof this.now === 'number' ? '' : ' WHERE excluded.checked_at >= lookups.checked_at'
               }`,
        values: [this.serviceId, rows.map(([e]) => e.domain), rows.map(([e]) => e.status), rows.map(([e]) => e.company ?? null), rows.map(([, at]) => at), rows.map(([e]) => e.name ?? null)],
      });
    }
    if (!this.decides) return out;
    out.push({
      text: `SELECT count(pg_advisory_xact_lock(hashtextextended($1::text || ':' || d, 0))) FROM unnest($2::text[]) AS d`,
      values: [this.serviceId, this.companies],
    });
    const read = new PgBatchRead();
    this.read = read;
    const asked = new Set(this.companies);
    const claimed = [...new Set(this.events.flatMap((e) => (e.type === 'intent' ? [e.company] : [])))].sort();
    if (this.claims) {
      const { since, until } = monthOf(this.moment);
      if (locked) out.push(...this.budgetLocks());
      out.push(
        { text: READ_CAPS, values: [since, until, this.run], read: (rows) => (read.capRows = rows.map((r) => capRow(Object.values(r)))) },
        { text: READ_PERSON, values: [this.run], read: (rows) => (read.runPerson = (rows[0]?.['person'] as string | null | undefined) ?? null) },
      );
    }
    out.push(
      {
        text: READ_PURCHASES,
        values: [this.serviceId, this.companies, this.dead, LEASE_MS],
        read: (rows) => {
          for (const r of rows) {
            // Rows of another statement (or company) would have the rule decide on what is not there.
            if (!asked.has(String(r['domain'])) || r['key_version'] === undefined) throw new Error('the store answered a batch\'s read of its purchases with rows of other companies; nothing of the batch was written');
            const p = toKept(r);
            read.kept.set(`${p.generation} ${p.domain}`, p);
            if (p.ownerRun !== null && r['pid'] !== null) {
              read.holders.set(p.ownerRun, { run: p.ownerRun, pid: num(r['pid']), host: String(r['host'] ?? ''), boot: (r['boot'] as string | null) ?? null, startedAt: num(r['started_at']), alive: r['alive'] === true });
            }
          }
        },
      },
    );
    // Only a claim asks what is held.
    if (claimed.length > 0) {
      out.push({
        text: READ_HOLDINGS,
        values: [this.serviceId, claimed],
        read: (rows) => {
          for (const r of rows) {
            if (!asked.has(String(r['domain'])) || r['bought_at'] === undefined) throw new Error('the store answered a batch\'s read of its holdings with rows of other companies; nothing of the batch was written');
            read.held.set(String(r['domain']), { domain: String(r['domain']), name: String(r['name']), boughtAt: num(r['bought_at']), lastUpdated: (r['last_updated'] as string | null) ?? null, generation: num(r['generation']), credits: num(r['credits']) });
          }
        },
      });
    }
    // Last: a prune that commits while this trip runs has removed what it read only if this sees its epoch (writes() checks it still holds).
    if (this.claims) {
      read.runStoreId = this.runStoreId;
      out.push({ text: READ_STORE_ID, values: [], read: (rows) => (read.storeIdNow = storeIdOf(rows as { key: string; value: string | null }[])) });
    }
    return out;
  }

  /** The month a claim's caps are read in: the batch's time (a journal's import claims nothing). */
  private get moment(): number {
    return typeof this.now === 'number' ? this.now : this.now.reduce((a, b) => Math.max(a, b), 0);
  }

  /** What the first round trip read; set by first(). */
  private read: PgBatchRead | null = null;

  decide(): BatchDecision {
    return decideBatch(this.events, this.read ?? new PgBatchRead(), this.run, this.now, this.storeNow ?? (typeof this.now === 'number' ? this.now : 0));
  }

  private budgetLocks(): Statement[] {
    return [
      { text: BUDGET_LOCKS[0] as string, values: [] },
      { text: BUDGET_LOCKS[1] as string, values: [this.run] },
    ];
  }

  /** The second round trip. Unless `locked`, a reserving batch takes the budgets' locks now and checks its additions still fit (CAPS_STILL_FIT). */
  writes(decision: BatchDecision, locked: boolean): Statement[] {
    const out: Statement[] = [];
    const s = this.serviceId;
    const mine = decision.underCaps.byPerson.get(this.read?.runPerson ?? '') ?? 0;
    if (this.claims && !locked) {
      const { since, until } = monthOf(this.moment);
      // Under the budgets' shared lock, which a prune takes alone: its epoch cannot move between this check and COMMIT.
      out.push(...this.budgetLocks(), { text: EPOCH_STILL, values: [this.read?.storeIdNow ?? null] });
      if (decision.reserved > 0) out.push({ text: CAPS_STILL_FIT, values: [since, until, this.run, decision.underCaps.all, mine] });
    }
    const ps = decision.purchases;
    if (ps.length > 0) {
      out.push({
        text: WRITE_PURCHASES,
        values: [
          s,
          ps.map((p) => p.domain),
          ps.map((p) => p.generation),
          ps.map((p) => p.keyVersion),
          ps.map((p) => p.intentKey),
          ps.map((p) => (p.uncertain ? 1 : 0)),
          ps.map((p) => p.unconfirmed),
          ps.map((p) => p.errorCode),
          ps.map((p) => p.lostAt),
          ps.map((p) => p.settleMs),
          ps.map((p) => p.outcome),
          ps.map((p) => p.credits),
          ps.map((p) => p.ownerRun),
          ps.map((p) => p.run),
          ps.map((p) => p.openedAt),
          ps.map((p) => p.closedAt),
          ps.map((p) => p.person),
          ps.map((p) => p.reserved),
          ps.map((p) => (p.resumed ? 1 : 0)),
        ],
      });
    }
    const rs = decision.records;
    if (rs.length > 0) {
      out.push({
        text: WRITE_RECORDS,
        values: [
          s,
          rs.map((r) => r.event.company),
          rs.map((r) => r.event.record.name),
          rs.map((r) => JSON.stringify(r.event.record)),
          rs.map((r) => r.at),
          rs.map((r) => r.event.record.last_updated || null),
          rs.map((r) => r.event.keyUsed ?? null),
          rs.map((r) => r.event.charged ?? 0),
          rs.map((r) => r.event.generation),
          this.run,
        ],
      });
    }
    const changed = [...new Set(this.events.filter((e) => e.type !== 'match' && e.type !== 'intent').map((e) => (e as { company: string }).company))];
    if (changed.length > 0) {
      out.push({ text: `SELECT count(pg_notify($1, $2::text || ':' || d)) FROM unnest($3::text[]) AS d`, values: [OUTCOME_CHANNEL, s, changed] });
    }
    return out;
  }

  /** Each event's claim; a busy one with its holder. */
  claimsOf(decision: BatchDecision | null): Claimed[] {
    if (decision === null) return this.events.map(() => ({ claim: OK }));
    return decision.answers.map((a) => {
      if (!('busy' in a)) return { claim: a };
      const holder = this.read?.holders.get(a.busy);
      if (holder === undefined) return { claim: { kind: 'busy' } };
      const { alive: _, ...who } = holder;
      return { claim: holder.host === this.host ? { kind: 'busy', pid: holder.pid } : { kind: 'busy', pid: holder.pid, host: holder.host }, holder: who };
    });
  }
}

/** No nested loops for reads joining a batch's arrays to purchases: without statistics the planner rereads the whole array per row. */
export const HASHED = 'SET LOCAL enable_nestloop = off';

/**
 * How long a batch waits for a company another session holds (batches and copy chunks hold one for milliseconds; longer is a stray
 * open transaction). Then the run stops (exit 6) rather than hit the query timeout and be taken for a lost connection.
 */
export const BATCH_LOCK_WAIT_MS = 30_000;

/**
 * Sends a batch as one transaction of two pipelined round trips; deadlocks and serialization failures are retried, anything else rolls
 * back and throws. The budgets' locks serialise claims across machines, so they are taken only with the writes, checking the caps still
 * fit; a batch whose room moved, or that met a cap (a 'capped' answer must be exact), is resent holding them from the start.
 */
export async function commitBatch(client: pg.Client, plan: BatchPlan, lockWaitMs = BATCH_LOCK_WAIT_MS, named = true): Promise<Claimed[]> {
  const send = (s: Statement): Promise<pg.QueryResult> => client.query(named ? { name: statementName(s.text), text: s.text, values: s.values } : { text: s.text, values: s.values });
  /** Settles every statement sent; throws the first failure (the transaction is then aborted). */
  const settle = async (sent: Promise<pg.QueryResult>[], statements: readonly Statement[], offset: number): Promise<pg.QueryResult[]> => {
    const results = await Promise.allSettled(sent);
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed !== undefined) throw failed.reason;
    const values = results.map((r) => (r as PromiseFulfilledResult<pg.QueryResult>).value);
    statements.forEach((s, i) => s.read?.((values[offset + i] as pg.QueryResult).rows as Row[]));
    return values;
  };
  let locked = false;
  for (let attempt = 1; ; attempt++) {
    try {
      const head = [
        // READ COMMITTED whatever the database's default: each statement sees what committed before
        // it, so the caps' spend read after their locks is what every other claim left.
        client.query('BEGIN ISOLATION LEVEL READ COMMITTED'),
        client.query(`SET LOCAL lock_timeout = ${Math.round(lockWaitMs)}`),
        // A process stopped mid-batch (a laptop's lid closed) must not hold its companies from the team.
        client.query(`SET LOCAL idle_in_transaction_session_timeout = ${IDLE_IN_TRANSACTION_MS}`),
      ];
      const first = plan.first(locked);
      const sent = [...head, ...first.map(send)];
      let decision: BatchDecision | null = null;
      let last: Statement[] = [];
      if (plan.decides) {
        await settle(sent, first, head.length);
        decision = plan.decide();
        if (!locked && decision.answers.some((a) => 'kind' in a && a.kind === 'capped')) throw new CapsMoved();
        last = plan.writes(decision, locked);
        sent.length = 0;
      }
      const offset = sent.length;
      sent.push(...last.map(send), client.query('COMMIT'));
      const done = await settle(sent, plan.decides ? last : first, plan.decides ? offset : head.length);
      if (done[done.length - 1]?.command !== 'COMMIT') throw new Error('the batch was rolled back');
      return plan.claimsOf(decision);
    } catch (error) {
      // A failed statement aborts the transaction, and COMMIT then rolls it back.
      await client.query('ROLLBACK').catch(() => {});
      const code = (error as { code?: string } | undefined)?.code;
      if (!locked && (error instanceof CapsMoved || code === CAPS_MOVED)) {
        locked = true;
        continue;
      }
      if (isRetryableConflict(error) && attempt < CONFLICT_RETRIES) continue;
      throw error;
    }
  }
}

/** A batch decided on a room read without the budgets' locks met a cap: it is decided again under them. */
class CapsMoved extends Error {}
