import { connect as connectTcp, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import pg from 'pg';
import { writeFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import type { CompanyRecord } from '../src/api/types.js';
import type { PgRecords } from '../src/store/postgres/records.js';
import { PgStore } from '../src/store/postgres/store.js';
import { client, connect, inTransaction, isConnectionLoss, onConnectionNotice, Session } from '../src/store/postgres/connect.js';
import { MAINTENANCE_LOCK } from '../src/store/postgres/schema.js';
import { BatchPlan, commitBatch } from '../src/store/postgres/writer.js';
import type { Claim, ServiceStore, StoreEvent } from '../src/store/types.js';
import { freshDatabase, lockWaits, sql } from './helpers/postgres.js';
import { companyRecord } from './helpers/records.js';

const info = { inputName: 'in.csv', inputSha256: 'x', rows: 1, dryRun: false, options: {} };
let pgRan = 0;
afterAll(() => {
  // .ci/run checks this: the PostgreSQL half of the suite ran, and was not skipped.
  const marker = process.env['ENRICH_TEST_POSTGRES_MARKER'];
  if (marker !== undefined && marker !== '' && pgRan > 0) writeFileSync(marker, `${pgRan} postgres scenarios\n`, { flag: 'a' });
});

const record = (domain: string, name = domain): CompanyRecord => companyRecord(domain, { name, employee_count: 5, specialties: ['x'] });
const intent = (c: string, extra: Partial<Extract<StoreEvent, { type: 'intent' }>> = {}): StoreEvent => ({ type: 'intent', company: c, generation: 1, keyVersion: 1, key: `k-${c}`, ...extra });
const hit = (c: string, g = 1, at = Date.now()): StoreEvent => ({ type: 'enrich', company: c, generation: g, keyVersion: 1, status: 'hit', charged: 1, record: record(c), keyUsed: `k-${c}`, at });

/**
 * What the team store does beyond the contract every backend keeps (test/store-contract.test.ts):
 * machines sharing one store, locks another session holds, query plans on a store without
 * statistics, a batch's round trips, and connections lost under a run.
 */
/**
 * `c` as a batch's writer sees it, but `between` runs once, after the batch's first round trip has
 * read what the rule asks for and before its writes go: what another machine does meanwhile.
 */
function betweenRoundTrips(c: pg.Client, between: () => Promise<unknown>): pg.Client {
  let done = false;
  return new Proxy(c, {
    get(target, key) {
      if (key === 'query')
        return (q: string | { text: string }, v?: unknown[]) => {
          const sent = (target.query as (...a: unknown[]) => Promise<unknown>)(q, v);
          if (done || !(typeof q === 'string' ? q : q.text).includes('FROM purchases p LEFT JOIN runs')) return sent;
          done = true;
          return sent.then(async (res) => (await between(), res));
        };
      const value: unknown = Reflect.get(target, key);
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

/** A fresh team store, and a pipelined connection of the test's own to send a batch on, as a run's writer does. */
async function withBatchWriter(then: (t: { url: string; store: PgStore; writer: pg.Client }) => Promise<void>): Promise<void> {
  const url = await freshDatabase();
  pgRan++;
  const store = await PgStore.open(url, { tool: 'test' });
  const writer = new pg.Client({ connectionString: url, pipeline: true } as pg.ClientConfig);
  await writer.connect();
  try {
    await then({ url, store, writer });
  } finally {
    await writer.end();
    await store.close();
  }
}

describe('the team store on PostgreSQL', () => {
  it('shares one store id (the base of every key) between machines, and records who ran', async () => {
    const url = await freshDatabase();
    pgRan++;
    const laptop = await PgStore.open(url, { tool: 'test', host: 'laptop', user: 'ana' });
    const cron = await PgStore.open(url, { tool: 'test', host: 'cron-1', user: 'svc' });
    try {
      expect(cron.storeId).toBe(laptop.storeId);
      expect(laptop.storeId).toMatch(/^[0-9a-f]{16}$/);
      await laptop.beginRun('svc', info);
      await cron.beginRun('svc', info);
      expect(await sql(url, 'SELECT host, "user" FROM runs ORDER BY id')).toStrictEqual([{ host: 'laptop', user: 'ana' }, { host: 'cron-1', user: 'svc' }]);
    } finally {
      await laptop.close();
      await cron.close();
    }
  });

  /** A team store with a query timeout of 2 s (a batch waits 1 s for a lock, 30 s at the default 60), and another session on its database. */
  const withAnalyst = async (): Promise<{ url: string; store: PgStore; analyst: pg.Client }> => {
    const url = await freshDatabase();
    pgRan++;
    const store = await PgStore.open(url, { tool: 'test', queryTimeoutMs: 2_000 });
    const analyst = new pg.Client({ connectionString: url });
    await analyst.connect();
    return { url, store, analyst };
  };

  it("ends a journal's import that another session blocks as unavailable (exit 6), in one line, not an unexpected error", async () => {
    const { store, analyst } = await withAnalyst();
    try {
      const importer = await store.importer('svc');
      // The company lock every write to acme.com takes, held by a transaction left open.
      await analyst.query('BEGIN');
      await analyst.query("SELECT pg_advisory_xact_lock(hashtextextended($1::text || ':acme.com', 0))", [await store.serviceId('svc')]);
      const events = [{ event: intent('acme.com'), at: Date.parse('2024-01-05T10:00:00Z') }];
      await expect(importer.importEvents(events)).rejects.toMatchObject({ kind: 'unavailable', message: expect.stringMatching(/^cannot write the team store at .*another session has held companies/) });
    } finally {
      await analyst.end();
      await store.close();
    }
  });

  // Another session: a psql transaction left open on a company the batch claims.
  it('gives up a batch another session blocks, below the query timeout, leaving nothing waiting', async () => {
    const { url, store, analyst } = await withAnalyst();
    try {
      const run = await store.beginRun('svc', info);
      expect(await run.append(intent('free.com'), true)).toStrictEqual({ kind: 'ok' });
      expect(await run.append(intent('other.com'), true)).toStrictEqual({ kind: 'ok' });
      await analyst.query('BEGIN');
      await analyst.query("UPDATE purchases SET uncertain = uncertain WHERE domain = 'free.com'");
      // Before: 60 s, taken for a lost connection and sent again (and waited again), then "lost
      // the team store", its first statement still waiting on the server.
      void run.append({ type: 'enrich', company: 'free.com', generation: 1, keyVersion: 1, status: 'miss', charged: 0 }).catch(() => {});
      await expect(run.flush()).rejects.toMatchObject({
        kind: 'unavailable',
        message: expect.stringMatching(/^cannot write the team store at 127\.0\.0\.1:\d+: another session has held companies this run writes for 1 s \(an open transaction\); no further paid call was made\. Run the same command once it is done: what was sent resumes under the same keys, nothing is bought twice$/),
      });
      expect(await lockWaits(url)).toBe(0);
      // The store is there: the run's end is written, and its claims let go but the one held
      // (left to the lease, not waited for). Before: the run's row stayed running, every claim held.
      await run.releaseClaims();
      await run.endRun({ status: 'failed', credits: 0, bought: 0, reused: 0 });
      expect(await sql(url, 'SELECT domain, owner_run IS NOT NULL AS owned FROM purchases ORDER BY domain')).toStrictEqual([
        { domain: 'free.com', owned: true },
        { domain: 'other.com', owned: false },
      ]);
      expect(await sql(url, 'SELECT status FROM runs')).toStrictEqual([{ status: 'failed' }]);
      await analyst.query('ROLLBACK');
      expect(await sql(url, "SELECT outcome FROM purchases WHERE domain = 'free.com'")).toStrictEqual([{ outcome: 'open' }]);
      // The whole table held (a LOCK TABLE, an ALTER TABLE under way): the release waits a moment,
      // and leaves its claims to the lease. Before: the query timeout, twice, the release thrown,
      // its statements left queued on the server.
      const second = await store.beginRun('svc', info);
      expect(await second.append(intent('third.com'), true)).toStrictEqual({ kind: 'ok' });
      await analyst.query('BEGIN');
      await analyst.query('LOCK TABLE purchases IN SHARE MODE');
      void second.append({ type: 'enrich', company: 'third.com', generation: 1, keyVersion: 1, status: 'miss', charged: 0 }).catch(() => {});
      await expect(second.flush()).rejects.toMatchObject({ kind: 'unavailable' });
      await second.releaseClaims();
      await second.endRun({ status: 'failed', credits: 0, bought: 0, reused: 0 });
      expect(await lockWaits(url)).toBe(0);
      await analyst.query('ROLLBACK');
      expect(await sql(url, "SELECT owner_run IS NOT NULL AS owned FROM purchases WHERE domain = 'third.com'")).toStrictEqual([{ owned: true }]);
      expect(await sql(url, 'SELECT status FROM runs ORDER BY id')).toStrictEqual([{ status: 'failed' }, { status: 'failed' }]);
    } finally {
      await analyst.query('ROLLBACK').catch(() => {});
      await analyst.end();
      await store.close().catch(() => {});
    }
  });

  // Its row, committed after this one's statement began, is asked for again.
  it('finds a service another machine registers at the same moment', async () => {
    const url = await freshDatabase();
    pgRan++;
    const store = await PgStore.open(url, { tool: 'test' });
    const other = new pg.Client({ connectionString: url });
    await other.connect();
    try {
      await other.query('BEGIN');
      const { rows } = await other.query<{ id: string }>("INSERT INTO services (name) VALUES ('svc') RETURNING id");
      const asked = store.serviceId('svc');
      // This statement waits on the other's row; once that commits, its insert does nothing and
      // its snapshot does not hold the row.
      await expect.poll(() => lockWaits(url), { timeout: 20_000 }).toBe(1);
      await other.query('COMMIT');
      expect(await asked).toBe(Number(rows[0]?.id));
      expect(await sql(url, 'SELECT count(*)::int AS n FROM services')).toStrictEqual([{ n: 1 }]);
    } finally {
      await other.end();
      await store.close();
    }
  });

  // A pid is judged only by the boot that ran it.
  it("two machines under one ENRICH_HOST never take each other's live claims", async () => {
    const url = await freshDatabase();
    pgRan++;
    const [a, b, again] = await Promise.all(['boot-a', 'boot-b', 'boot-a'].map((boot) => PgStore.open(url, { tool: 'test', host: 'same-name', boot })));
    try {
      const ra = await (a as PgStore).beginRun('svc', info);
      await ra.append(intent('acme.com'), true);
      // a's process as any other machine sees it: a pid that is not running there.
      await sql(url, "UPDATE runs SET pid = 2147483646 WHERE boot = 'boot-a'");
      const rb = await (b as PgStore).beginRun('svc', info);
      expect((await rb.append(intent('acme.com'), true)).kind).toBe('busy');
      // The boot that ran it knows that process gone, and takes the claim over at once.
      const rc = await (again as PgStore).beginRun('svc', info);
      expect(await rc.append(intent('acme.com'), true)).toMatchObject({ kind: 'ok', tookOver: true });
    } finally {
      for (const s of [a, b, again]) await s?.close();
    }
  });

  it('wakes a run waiting on a company when the outcome commits (NOTIFY in its transaction)', async () => {
    const url = await freshDatabase();
    pgRan++;
    const laptop = await PgStore.open(url, { tool: 'test', host: 'laptop' });
    const cron = await PgStore.open(url, { tool: 'test', host: 'cron-1' });
    const a = await laptop.beginRun('svc', info);
    const b = await cron.beginRun('svc', info);
    await a.append(intent('acme.com'), true);
    expect(await b.append(intent('acme.com'), true)).toStrictEqual({ kind: 'busy', pid: process.pid, host: 'laptop' });
    // A poll far longer than the test: only the notification ends the wait in time.
    const waited = b.waitForOutcome('acme.com', 600_000);
    // Listening before the outcome is sent (a notification sent earlier reaches no one).
    await b.waitForOutcome('other.com', 0);
    await a.append(hit('acme.com'));
    await a.flush();
    expect(await waited).toBe('notified');
    expect((await b.append(intent('acme.com'), true)).kind).toBe('held');
    await laptop.close();
    await cron.close();
  });

  /**
   * The rows a plan handled: every node's rows out, and those its filters and join filters threw
   * away, times its loops (EXPLAIN gives each per loop). A scan of the service's every purchase,
   * or a batch's array read again for every purchase, shows here; rows output alone hide both.
   */
  const handled = (node: Record<string, unknown>): number =>
    (Number(node['Actual Rows'] ?? 0) + Number(node['Rows Removed by Filter'] ?? 0) + Number(node['Rows Removed by Join Filter'] ?? 0) + Number(node['Rows Removed by Index Recheck'] ?? 0)) *
      Number(node['Actual Loops'] ?? 1) +
    ((node['Plans'] as Record<string, unknown>[] | undefined) ?? []).map(handled).reduce((a, b) => a + b, 0);

  /**
   * Runs each statement of `plan` as the writer sends it (by custom plan and by generic), rolled
   * back: its reads, then the writes the rule decides from them; the rows each handled.
   */
  async function planWork(c: pg.Client, plan: BatchPlan): Promise<{ statement: string; mode: string; rows: number }[]> {
    const out: { statement: string; mode: string; rows: number }[] = [];
    const first = plan.first(true);
    await c.query('BEGIN');
    for (const s of first) s.read?.((await c.query(s.text, s.values)).rows);
    await c.query('ROLLBACK');
    const statements = plan.decides ? [...first, ...plan.writes(plan.decide(), true)] : first;
    // EXECUTE takes its arguments as literals, not as parameters: arrays in PostgreSQL's text form.
    const element = (v: unknown): string => (v === null || v === undefined ? 'NULL' : typeof v === 'string' ? `"${v.replace(/["\\]/g, (m) => `\\${m}`)}"` : String(v));
    const literal = (v: unknown): string => (v === null || v === undefined ? 'NULL' : c.escapeLiteral(Array.isArray(v) ? `{${v.map(element).join(',')}}` : String(v)));
    for (const [i, statement] of statements.entries()) {
      for (const mode of ['auto', 'force_generic_plan']) {
        await c.query('BEGIN');
        await c.query(`SET LOCAL plan_cache_mode = ${mode}`);
        await c.query(`PREPARE s${i} AS ${statement.text}`);
        const args = statement.values.map(literal).join(', ');
        const { rows } = await c.query(`EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE s${i}${args === '' ? '' : `(${args})`}`);
        await c.query('ROLLBACK');
        await c.query(`DEALLOCATE s${i}`);

        out.push({ statement: statement.text.replace(/\s+/g, ' ').slice(0, 70), mode, rows: handled((rows[0] as { 'QUERY PLAN': [{ Plan: Record<string, unknown> }] })['QUERY PLAN'][0].Plan) });
      }
    }
    return out;
  }

  /** Makes the statistics of `c`'s writes so far visible to others now (they are flushed a second or more later). */
  const flushStats = (c: pg.Client): Promise<unknown> => c.query('SELECT pg_stat_force_next_flush()');

  // Every kind of write, under custom plans and generic ones.
  it("reads only a batch's own purchases and holdings on a store with no statistics yet", async () => {
    const url = await freshDatabase();
    pgRan++;
    const store = await PgStore.open(url, { tool: 'test' });
    const run = await store.beginRun('svc', info);
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    try {
      const [{ id }] = (await c.query<{ id: number }>('SELECT id FROM services')).rows as [{ id: number }];
      // 3,000 companies bought before, 900 purchases left open by a run that is gone, the 50 this
      // run's batch settles, and no ANALYZE since (autovacuum's first pass is a minute off).
      await c.query(`INSERT INTO companies (service, domain, name, record, bought_at, credits, generation) SELECT $1, 'old-' || n || '.com', 'Old', '{}', 1, 1, 1 FROM generate_series(1, 3000) n`, [id]);
      await c.query(`INSERT INTO purchases (service, domain, generation, key_version, outcome, opened_at, closed_at, credits) SELECT $1, 'old-' || n || '.com', 1, 1, 'hit', 1, 2, 1 FROM generate_series(1, 3000) n`, [id]);
      await c.query(`INSERT INTO purchases (service, domain, generation, key_version, intent_key, outcome, owner_run, opened_at) SELECT $1, 'gone-' || n || '.com', 1, 1, 'k-gone-' || n || '.com', 'open', $2, 1 FROM generate_series(1, 900) n`, [id, run.runId + 1000]);
      await c.query(`INSERT INTO purchases (service, domain, generation, key_version, intent_key, outcome, owner_run, opened_at) SELECT $1, 'open-' || n || '.com', 1, 1, 'k-open-' || n || '.com', 'open', $2, 1 FROM generate_series(1, 60) n`, [id, run.runId]);
      const open = (n: number): string => `open-${n}.com`;
      const events: StoreEvent[] = [];
      for (let i = 0; i < 10; i++) events.push(intent(`new-${i}.com`), intent(`old-${i * 7 + 1}.com`, { generation: 2 }));
      for (let i = 0; i < 10; i++) events.push(hit(open(i + 1), 1, 1_700_000_000_000));
      for (let i = 11; i <= 20; i++) events.push({ type: 'enrich', company: open(i), generation: 1, keyVersion: 1, status: 'error', code: 'rate_limited', verdict: 'retired', at: 5 });
      for (let i = 21; i <= 30; i++) events.push({ type: 'enrich', company: open(i), generation: 1, keyVersion: 1, status: 'error', code: 'network_error', verdict: 'kept', lost: true, at: 5 });
      for (let i = 31; i <= 40; i++) events.push({ type: 'enrich', company: open(i), generation: 1, keyVersion: 1, status: 'error', code: 'invalid_domain', final: true, at: 5 });
      for (let i = 41; i <= 50; i++) events.push({ type: 'release', company: open(i), generation: 1 });
      for (let i = 51; i <= 60; i++) events.push({ type: 'unclaim', company: open(i), generation: 1, keyVersion: 1, key: `k-${open(i)}` });
      const plan = new BatchPlan(id, run.runId, store.host, events, 1_700_000_000_000, []);
      const work = await planWork(c, plan);
      // Claims, outcomes closed and failed, retired, kept, release, unclaim: one write of purchases.
      expect(work.filter((w) => w.statement.includes('INSERT INTO purchases')).map((w) => w.mode)).toStrictEqual(['auto', 'force_generic_plan']);
      // The batch names 80 companies: a scan of the service's purchases handles 3,960 rows or more
      // (an index of the run's purchases, the 960 open), its holdings 3,000. A batch's array read
      // again for each purchase it finds is left to the next test: at this size it is no more.
      for (const w of work) expect(w.rows, `${w.mode}: ${w.statement}`).toBeLessThanOrEqual(1500);
    } finally {
      await c.end();
      await store.close();
    }
  });

  /** A new store that autovacuum leaves alone, a run on it, and a connection of the test's own. */
  async function withoutAutovacuum(then: (c: pg.Client, run: PgRecords, id: number, host: string) => Promise<void>): Promise<void> {
    const url = await freshDatabase();
    pgRan++;
    const store = await PgStore.open(url, { tool: 'test' });
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    try {
      const run = await store.beginRun('svc', info);
      const [{ id }] = (await c.query<{ id: number }>('SELECT id FROM services')).rows as [{ id: number }];
      await c.query('ALTER TABLE purchases SET (autovacuum_enabled = off); ALTER TABLE companies SET (autovacuum_enabled = off)');
      await then(c, run, id, store.host);
    } finally {
      await c.end();
      await store.close();
    }
  }

  it('frees the companies of a batch cut off midway once the server ends it idle', async () => {
    const url = await freshDatabase();
    pgRan++;
    const store = await PgStore.open(url, { tool: 'test' });
    const writer = new pg.Client({ connectionString: url, pipeline: true } as pg.ClientConfig);
    const other = new pg.Client({ connectionString: url, pipeline: true } as pg.ClientConfig);
    try {
      const run = await store.beginRun('svc', info);
      const [{ id }] = (await sql<{ id: number }>(url, 'SELECT id FROM services')) as [{ id: number }];
      await Promise.all([writer.connect(), other.connect()]);
      writer.on('error', () => {});
      // The process stops once its first statements went out: the rest, COMMIT with them, never do.
      let sent = 0;
      const cut = new Proxy(writer, {
        get(target, key) {
          if (key === 'query') return (...args: unknown[]) => (sent++ < 4 ? (target.query as (...a: unknown[]) => Promise<unknown>)(...args) : new Promise(() => {}));
          const value: unknown = Reflect.get(target, key);
          return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
        },
      });
      void commitBatch(cut, new BatchPlan(id, run.runId, store.host, [intent('held.com')], 1_700_000_000_000, [])).catch(() => {});
      // Its claim went out: the company's lock is held by a transaction that waits for the rest.
      const heldIdle = async (): Promise<number> =>
        (await sql<{ n: number }>(url, "SELECT count(*)::int AS n FROM pg_locks l JOIN pg_stat_activity a USING (pid) WHERE a.datname = current_database() AND a.state = 'idle in transaction' AND l.locktype = 'advisory' AND l.granted"))[0]?.n ?? 0;
      await expect.poll(heldIdle, { timeout: 20_000 }).toBeGreaterThan(0);
      // Another machine's batch for the same company waits only until the server ends that one
      // (10 s), not its own lock wait (30 s, then a stop).
      expect(await commitBatch(other, new BatchPlan(id, run.runId, store.host, [intent('held.com')], 1_700_000_000_000, []))).toHaveLength(1);
    } finally {
      void writer.end().catch(() => {});
      await other.end();
      await store.close();
    }
  });

  it('reads rows in proportion to a batch, not to a big store that was never analyzed', async () => {
    // A role that may not analyze, and autovacuum not come (or off): no statistics, ever.
    await withoutAutovacuum(async (c, run, id, host) => {
      await c.query(`INSERT INTO companies (service, domain, name, record, bought_at, credits, generation) SELECT $1, 'old-' || n || '.com', 'Old', '{}', 1, 1, 1 FROM generate_series(1, 100000) n`, [id]);
      await c.query(`INSERT INTO purchases (service, domain, generation, key_version, outcome, opened_at, closed_at, credits) SELECT $1, 'old-' || n || '.com', 1, 1, 'hit', 1, 2, 1 FROM generate_series(1, 100000) n`, [id]);
      await c.query(`INSERT INTO purchases (service, domain, generation, key_version, intent_key, outcome, owner_run, opened_at) SELECT $1, 'open-' || n || '.com', 1, 1, 'k-open-' || n || '.com', 'open', $2, 1 FROM generate_series(1, 2000) n`, [id, run.runId]);
      const n = Array.from({ length: 2000 }, (_, i) => i + 1);
      const open = (i: number): string => `open-${i}.com`;
      const batches: [string, StoreEvent[]][] = [
        ['outcomes', n.map((i) => (i % 2 === 0 ? hit(open(i), 1, 1_700_000_000_000) : { type: 'enrich', company: open(i), generation: 1, keyVersion: 1, status: 'miss', charged: 0, keyUsed: `k-${open(i)}`, at: 5 }))],
        ['retired and kept', n.map((i) => ({ type: 'enrich', company: open(i), generation: 1, keyVersion: 1, status: 'error', code: 'server_error', verdict: i % 2 === 0 ? 'retired' : 'kept', lost: true, at: 5 }))],
        ['failed', n.map((i) => ({ type: 'enrich', company: open(i), generation: 1, keyVersion: 1, status: 'error', code: 'invalid_domain', final: true, at: 5 }))],
        ['releases', n.map((i) => ({ type: 'release', company: open(i), generation: 1 }))],
        ['unclaims', n.map((i) => ({ type: 'unclaim', company: open(i), generation: 1, keyVersion: 1, key: `k-${open(i)}` }))],
      ];
      // The claims are the next test's: on a store never analyzed they rely on the writer's analyze.
      for (const [what, events] of batches) {
        for (const w of await planWork(c, new BatchPlan(id, run.runId, host, events, 1_700_000_000_000, []))) {
          // An array of 2,000 read again for each purchase found is 4,000,000 rows; the table, 102,000.
          expect(w.rows, `${what}, ${w.mode}: ${w.statement}`).toBeLessThanOrEqual(20 * 2000);
        }
      }
      // And the writer sends them so: a batch of claims and outcomes reads its purchases once and writes them once.
      const sent: string[] = [];
      const recording = new Proxy(c, {
        get(target, key) {
          if (key === 'query') return (q: string | { text: string }, v?: unknown[]) => (sent.push(typeof q === 'string' ? q : q.text), target.query(q as string, v));
          const value: unknown = Reflect.get(target, key);
          return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
        },
      });
      const mixed: StoreEvent[] = [intent('new-1.com'), ...(batches[0]?.[1].slice(0, 10) ?? []), intent('new-2.com'), { type: 'release', company: open(1999), generation: 1 }];
      await commitBatch(recording, new BatchPlan(id, run.runId, host, mixed, 1_700_000_000_000, []));
      const touching = /FROM purchases p LEFT JOIN runs|FROM companies WHERE|INSERT INTO purchases|INSERT INTO companies|enable_nestloop/;
      expect(sent.flatMap((text) => text.match(touching)?.[0] ?? [])).toStrictEqual(['FROM purchases p LEFT JOIN runs', 'FROM companies WHERE', 'INSERT INTO purchases', 'INSERT INTO companies']);
    });
  });

  /**
   * A store of `purchases` closed purchases that autovacuum leaves alone (its own first analyze
   * must not come between the insert and the run's look), a run that writes one intent, and the
   * tables analyzed once the run's look (and its analyze, if any) is over.
   */
  async function firstLook(purchases: number, then: (c: pg.Client, run: PgRecords, id: number, host: string) => Promise<void> = async () => {}): Promise<string[]> {
    let tables: string[] = [];
    await withoutAutovacuum(async (c, run, id, host) => {
      await c.query(`INSERT INTO purchases (service, domain, generation, key_version, outcome, opened_at, closed_at, credits) SELECT $1, 'old-' || n || '.com', 1, 1, 'hit', 1, 2, 1 FROM generate_series(1, $2::int) n`, [id, purchases]);
      await flushStats(c);
      const analyzed = async (): Promise<string[]> =>
        (await c.query<{ relname: string }>(`SELECT relname FROM pg_stat_user_tables WHERE relname IN ('purchases', 'companies') AND analyze_count > 0 ORDER BY relname`)).rows.map((r) => r.relname);
      expect(await analyzed()).toStrictEqual([]);
      // The run's writer looks when it starts.
      expect(await run.append(intent('first.com'), true)).toStrictEqual({ kind: 'ok' });
      await (run as unknown as { statistics: { stop(): Promise<void> } }).statistics.stop();
      tables = await analyzed();
      await then(c, run, id, host);
    });
    return tables;
  }

  it('gathers the statistics of a store that has none when a run starts, beside its writes', async () => {
    // 3,000 purchases and no statistics; no companies.
    const analyzed = await firstLook(3000, async (c, run, id, host) => {
      // Then a batch of 2,000 claims, new companies and new generations of held ones: 4,000,000
      // rows before the analyze (each purchase found matched against the whole array).
      const claims = Array.from({ length: 2000 }, (_, i) => (i % 2 === 0 ? intent(`new-${i}.com`) : intent(`old-${i}.com`, { generation: 2 })));
      for (const w of await planWork(c, new BatchPlan(id, run.runId, host, claims, 1_700_000_000_000, []))) {
        expect(w.rows, `${w.mode}: ${w.statement}`).toBeLessThanOrEqual(20 * 2000);
      }
    });
    expect(analyzed).toStrictEqual(['purchases']);
  });

  it('leaves a store of fewer purchases than that to autovacuum', async () => {
    expect(await firstLook(900)).toStrictEqual([]);
  });

  // That batch writes the purchase whole; the run's end then lets it go.
  it("a run's final release passes over a purchase another batch has read, without waiting", async () => {
    await withBatchWriter(async ({ url, store, writer }) => {
      const r = await store.beginRun('svc', info);
      const s = await store.beginRun('svc', info);
      const [{ id }] = (await sql<{ id: number }>(url, 'SELECT id FROM services')) as [{ id: number }];
      expect(await r.append(intent('p.com'), true)).toStrictEqual({ kind: 'ok' });
      expect(await r.append(intent('q.com'), true)).toStrictEqual({ kind: 'ok' });
      // S's batch (a lost answer for p.com, as a paused run's arrives) has read the purchase, R as
      // its holder, and holds the company; R lets go of its claims now, before S writes.
      const gated = betweenRoundTrips(writer, () => r.releaseClaims());
      const kept: StoreEvent = { type: 'enrich', company: 'p.com', generation: 1, keyVersion: 1, status: 'error', code: 'network_error', verdict: 'kept', lost: true };
      await commitBatch(gated, new BatchPlan(id, s.runId, store.host, [kept], Date.now(), []));
      // q.com let go; p.com left to R, as S wrote it (not cleared, then written back).
      expect(await sql(url, 'SELECT domain, owner_run, uncertain FROM purchases ORDER BY domain')).toStrictEqual([
        { domain: 'p.com', owner_run: String(r.runId), uncertain: 1 },
        { domain: 'q.com', owner_run: null, uncertain: 0 },
      ]);
      await r.endRun({ status: 'completed', credits: 0, bought: 0, reused: 0 });
      // Free for another run at once, under the key that may have been charged.
      expect(await (await store.beginRun('svc', info)).append(intent('p.com'), true)).toStrictEqual({ kind: 'ok', tookOver: true });
    });
  });

  // Another machine claims between the batch's reads and writes: the batch is capped exactly.
  it("locks the budgets only with a batch's writes and decides its claims again under them", async () => {
    await withBatchWriter(async ({ url, store, writer }) => {
      let other: PgStore | undefined;
      try {
        await sql(url, "INSERT INTO budgets (person, credits, set_at) VALUES ('', 1, 0)");
        const a = await store.beginRun('svc', info);
        other = await PgStore.open(url, { tool: 'test' });
        const b = await other.beginRun('svc', info);
        const [{ id }] = (await sql<{ id: number }>(url, 'SELECT id FROM services')) as [{ id: number }];
        // A's batch has read the caps' room (1 credit left) and not yet written; B claims that credit now.
        let theirs: Claim | null = null;
        const gated = betweenRoundTrips(writer, async () => (theirs = await b.append(intent('b.com'), true)));
        const [mine] = await commitBatch(gated, new BatchPlan(id, a.runId, store.host, [intent('a.com')], Date.now(), []));
        expect(theirs).toStrictEqual({ kind: 'ok' });
        expect(mine?.claim).toStrictEqual({ kind: 'capped', person: null, cap: 1 });
        expect(await sql(url, "SELECT domain FROM purchases WHERE intent_key IS NOT NULL")).toStrictEqual([{ domain: 'b.com' }]);
      } finally {
        await other?.close();
      }
    });
  });

  // A cap lowered between the batch's two round trips refuses its claim.
  it("checks the caps with a batch's writes when it reserves as much as it frees", async () => {
    await withBatchWriter(async ({ url, store, writer }) => {
      await sql(url, "INSERT INTO budgets (person, credits, set_at) VALUES ('', 5, 0)");
      const run = await store.beginRun('svc', info);
      expect(await run.append(intent('r.com'), true)).toStrictEqual({ kind: 'ok' });
      const [{ id }] = (await sql<{ id: number }>(url, 'SELECT id FROM services')) as [{ id: number }];
      // Read with room for 4; the team's cap goes to 0 now (enrich budget set).
      const gated = betweenRoundTrips(writer, () => sql(url, "UPDATE budgets SET credits = 0 WHERE person = ''"));
      const miss: StoreEvent = { type: 'enrich', company: 'r.com', generation: 1, keyVersion: 1, status: 'miss', charged: 0 };
      const claims = await commitBatch(gated, new BatchPlan(id, run.runId, store.host, [miss, intent('q.com')], Date.now(), []));
      expect(claims.map((c) => c.claim)).toStrictEqual([{ kind: 'ok' }, { kind: 'capped', person: null, cap: 0 }]);
      expect(await sql(url, 'SELECT domain FROM purchases WHERE intent_key IS NOT NULL')).toStrictEqual([]);
    });
  });

  it('reads each claim of a pipelined batch from its own reads, outcomes and releases between', async () => {
    const url = await freshDatabase();
    pgRan++;
    const store = await PgStore.open(url, { tool: 'test' });
    const other = await PgStore.open(url, { tool: 'test' });
    const w = client(url, true);
    await w.connect();
    try {
      const run = await store.beginRun('svc', info);
      const theirs = await other.beginRun('svc', info);
      expect(await theirs.append(intent('busy.com'), true)).toStrictEqual({ kind: 'ok' });
      expect(await theirs.append(intent('held.com'), true)).toStrictEqual({ kind: 'ok' });
      await theirs.append(hit('held.com'), true);
      expect(await run.append(intent('mine.com'), true)).toStrictEqual({ kind: 'ok' });
      expect(await run.append(intent('gone.com'), true)).toStrictEqual({ kind: 'ok' });
      const id = Number((await sql<{ id: string }>(url, 'SELECT id FROM services'))[0]?.id);
      const events: StoreEvent[] = [
        intent('free.com'),
        { type: 'enrich', company: 'mine.com', generation: 1, keyVersion: 1, status: 'miss', charged: 0, keyUsed: 'k-mine.com', at: 5 },
        intent('busy.com'),
        { type: 'release', company: 'gone.com', generation: 1 },
        intent('held.com'),
      ];
      const claims = await commitBatch(w, new BatchPlan(id, run.runId, store.host, events, Date.now(), []));
      expect(claims.map((c) => c.claim.kind)).toStrictEqual(['ok', 'ok', 'busy', 'ok', 'held']);
    } finally {
      await w.end();
      await other.close();
      await store.close();
    }
  });

  // A pooler's reset or a DEALLOCATE leaves the session without them.
  it("prepares a batch's statements again on a new connection that does not have them", async () => {
    const url = await freshDatabase();
    pgRan++;
    const store = await PgStore.open(url, { tool: 'test' });
    try {
      const run = await store.beginRun('svc', info);
      expect(await run.append(intent('a.com'), true)).toStrictEqual({ kind: 'ok' });
      // What a transaction pooler, or one that resets sessions under its clients, does.
      await (run as unknown as { writer: pg.Client }).writer.query('DEALLOCATE ALL');
      expect(await run.append(intent('b.com'), true)).toStrictEqual({ kind: 'ok' });
      await run.append(hit('a.com'), true);
      expect((await sql<{ n: string }>(url, `SELECT count(*) AS n FROM purchases WHERE intent_key IS NOT NULL`))[0]?.n).toBe('1');
    } finally {
      await store.close();
    }
  });

  it('refuses a store a newer enrich wrote, and says in one line when the server is unreachable', async () => {
    const url = await freshDatabase();
    pgRan++;
    await (await PgStore.open(url, { tool: 'test' })).close();
    await sql(url, "UPDATE meta SET value = '99' WHERE key = 'schema_version'");
    await expect(PgStore.open(url, { tool: 'test' })).rejects.toThrow(expect.objectContaining({ kind: 'usage', message: expect.stringMatching(/was written by a newer enrich \(schema 99\); upgrade enrich/) }));
    const closed = new URL(url);
    closed.port = '9';
    const error = (await PgStore.open(closed.toString(), { tool: 'test' }).then(() => null, (e: unknown) => e)) as Error & { kind: string };
    expect(error).toMatchObject({ kind: 'unavailable' });
    expect(error.message).toMatch(/^cannot reach the team store at 127\.0\.0\.1:9: connection refused .*nothing was sent to the service/);
    expect(error.message).not.toContain(closed.password);
    expect(error.message).not.toContain('\n');
  });
});

/** A TCP proxy to the suite's PostgreSQL that a test can cut (every connection dropped, new ones refused) and mend. */
async function cuttableProxy(target: URL): Promise<{ url: string; cut(): void; mend(): Promise<void>; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  let server: Server | null = null;
  let port = 0;
  const listen = (): Promise<void> =>
    new Promise((resolve) => {
      server = createServer((inbound) => {
        const outbound = connectTcp(Number(target.port), target.hostname);
        for (const s of [inbound, outbound]) {
          sockets.add(s);
          s.on('error', () => {});
          s.on('close', () => sockets.delete(s));
        }
        inbound.pipe(outbound).pipe(inbound);
      });
      server.listen(port, '127.0.0.1', () => {
        port = (server?.address() as AddressInfo).port;
        resolve();
      });
    });
  await listen();
  const url = new URL(target);
  url.port = String(port);
  return {
    url: url.toString(),
    cut: () => {
      server?.close();
      server = null;
      for (const s of sockets) s.destroy();
    },
    mend: listen,
    close: async () => {
      server?.close();
      for (const s of sockets) s.destroy();
    },
  };
}

describe('the team store when the connection is lost', () => {
  it('sends a batch whose COMMIT may have landed again without counting anything twice', async () => {
    const url = await freshDatabase();
    pgRan++;
    const store = await PgStore.open(url, { tool: 'test' });
    const run = await store.beginRun('svc', info);
    const [{ rows }] = [await store.db.query<{ id: number }>('SELECT id FROM services')];
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    try {
      const events: StoreEvent[] = [intent('acme.com'), { type: 'match', domain: 'acme.com', status: 'hit', company: 'acme.com', name: 'Acme' }, intent('bolt.com')];
      const then: StoreEvent[] = [hit('acme.com', 1, 1_700_000_000_000), { type: 'enrich', company: 'bolt.com', generation: 1, keyVersion: 1, status: 'error', code: 'validation_error', final: true, charged: 0, at: 1_700_000_000_001 }];
      for (const batch of [events, then]) {
        const plan = (): BatchPlan => new BatchPlan(Number(rows[0]?.id), run.runId, store.host, batch, 1_700_000_000_000, []);
        const first = await commitBatch(c, plan());
        // The answer to the first COMMIT was lost: the same batch goes again, and finds the same.
        expect(await commitBatch(c, plan())).toStrictEqual(first);
      }
      expect(await run.creditsSince(0)).toStrictEqual({ charged: 1, unconfirmed: 0 });
      expect((await run.companyState('acme.com')).purchase).toMatchObject({ outcome: 'hit', closedAt: 1_700_000_000_000, intentKey: null });
      expect((await run.companyState('bolt.com')).purchase).toMatchObject({ outcome: 'failed' });
    } finally {
      await c.end();
      await store.close();
    }
  });

  /** A run on a fresh database reached through a proxy the test can cut; `reconnectMs`: how long a lost connection is tried again. */
  async function throughProxy(reconnectMs: number, test: (run: ServiceStore, proxy: Awaited<ReturnType<typeof cuttableProxy>>, url: string) => Promise<void>): Promise<void> {
    const url = await freshDatabase();
    pgRan++;
    const proxy = await cuttableProxy(new URL(url));
    const store = await PgStore.open(proxy.url, { tool: 'test', reconnectMs });
    try {
      await test(await store.beginRun('svc', info), proxy, url);
    } finally {
      await store.close();
      await proxy.close();
    }
  }

  it("judges a batch sent again after the month turned by the new month's spend", async () => {
    const url = await freshDatabase();
    pgRan++;
    const proxy = await cuttableProxy(new URL(url));
    const lastOfMonth = Date.UTC(2026, 10, 30, 23, 59, 59);
    let t = lastOfMonth;
    const store = await PgStore.open(proxy.url, { tool: 'test', reconnectMs: 60_000, now: () => t });
    let lost = false;
    onConnectionNotice((n) => void (lost ||= n.lost));
    try {
      const run = await store.beginRun('svc', info);
      const [{ id }] = (await sql<{ id: number }>(url, 'SELECT id FROM services')) as [{ id: number }];
      // A cap of 1 a month, November's spent already; December's not.
      await sql(url, "INSERT INTO budgets (person, credits, set_at) VALUES ('', 1, 0)");
      await sql(url, "INSERT INTO purchases (service, domain, generation, key_version, outcome, credits, opened_at, closed_at) VALUES ($1, 'nov.com', 1, 1, 'hit', 1, $2, $2)", [id, lastOfMonth - 3_600_000]);
      proxy.cut();
      // Planned on the last second of November; its first send finds the store gone.
      const claim = run.append(intent('dec.com'), true);
      await expect.poll(() => lost, { timeout: 20_000 }).toBe(true);
      t = Date.UTC(2026, 11, 1, 0, 0, 1);
      await proxy.mend();
      expect(await claim).toStrictEqual({ kind: 'ok', tookOver: true });
    } finally {
      onConnectionNotice(null);
      await store.close();
      await proxy.close();
    }
  });

  it('connects again when the connection drops under a run: reads and writes go on, none lost', async () => {
    await throughProxy(60_000, async (run, proxy, url) => {
      expect(await run.append(intent('acme.com'), true)).toStrictEqual({ kind: 'ok' });
      proxy.cut();
      // Written while the store is unreachable: the claim waits (no paid call could start), then lands.
      const claim = run.append(intent('bolt.com'), true);
      const outcome = run.append(hit('acme.com', 1, 1_700_000_000_000));
      const read = run.companyState('acme.com');
      await proxy.mend();
      // Sent again after the cut: whether the first send landed (and took anything over) is not
      // known, so the claim says it may have: its key is kept, never retired for want of proof.
      expect(await claim).toStrictEqual({ kind: 'ok', tookOver: true });
      await outcome;
      await read;
      await run.flush();
      expect(await run.creditsSince(0)).toStrictEqual({ charged: 1, unconfirmed: 0 });
      expect((await run.companyState('bolt.com')).purchase).toMatchObject({ outcome: 'open', intentKey: 'k-bolt.com' });
      await run.endRun({ status: 'done', credits: 1, bought: 1, reused: 0 });
      expect(await sql(url, 'SELECT status FROM runs')).toStrictEqual([{ status: 'done' }]);
    });
  });

  // A session's advisory lock (ledger copy's) is lost with its connection.
  it('never goes on without a lock it held, and connects again once it lets go', async () => {
    const url = await freshDatabase();
    pgRan++;
    const proxy = await cuttableProxy(new URL(url));
    const first = new pg.Client({ connectionString: proxy.url });
    await first.connect();
    const session = new Session(proxy.url, first, 60_000);
    try {
      await session.lock(MAINTENANCE_LOCK, 30_000);
      proxy.cut();
      await proxy.mend();
      // Before: connected again without the lock, and the copy went on beside any prune.
      const error = (await session.query('SELECT 1').then(() => null, (e: unknown) => e)) as Error & { kind: string };
      expect(error).toMatchObject({ kind: 'unavailable' });
      expect(error.message).toMatch(/^lost the connection to the team store \(database \S+ on 127\.0\.0\.1:\d+\), and the lock it held with it/);
      await session.unlock(MAINTENANCE_LOCK);
      // The lock let go: a lost connection is connected again, as for any other statement.
      expect((await session.query<{ n: number }>('SELECT 1 AS n')).rows).toStrictEqual([{ n: 1 }]);
      // So too after a transaction the loss ended: it is not taken for still open.
      await session.lock(MAINTENANCE_LOCK, 30_000);
      await session.query('BEGIN');
      proxy.cut();
      await proxy.mend();
      await expect(session.query('SELECT 1')).rejects.toMatchObject({ kind: 'unavailable' });
      await session.unlock(MAINTENANCE_LOCK);
      expect((await session.query<{ n: number }>('SELECT 2 AS n')).rows).toStrictEqual([{ n: 2 }]);
      // Cut under a statement in flight (seen running on the server): sent again on a new connection.
      const slow = session.query<{ n: number }>('SELECT 3 AS n, pg_sleep(1)');
      while ((await sql(url, "SELECT 1 FROM pg_stat_activity WHERE query LIKE 'SELECT 3 AS n%'")).length === 0);
      proxy.cut();
      await proxy.mend();
      expect((await slow).rows).toMatchObject([{ n: 3 }]);
    } finally {
      await session.end();
      await proxy.close();
    }
  });

  // The next statement fails, and nothing of the transaction runs elsewhere.
  it('never goes on after a transaction whose connection was lost while idle', async () => {
    const url = await freshDatabase();
    pgRan++;
    await sql(url, 'CREATE TABLE t (x int)');
    const first = await connect(client(url));
    const session = new Session(url, first, 5_000, 5_000);
    try {
      await session.query('BEGIN');
      await session.query('SELECT pg_advisory_xact_lock(42)');
      const pid = (await session.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid;
      const gone = new Promise((resolve) => first.once('error', resolve));
      await sql(url, 'SELECT pg_terminate_backend($1)', [pid]);
      await gone;
      // Before: connected again, and the INSERT ran autocommitted, outside the transaction and its lock.
      await expect(session.query('INSERT INTO t VALUES (1)')).rejects.toMatchObject({ kind: 'unavailable' });
      await session.query('ROLLBACK').catch(() => {});
      expect(await sql(url, 'SELECT count(*)::int AS n FROM t')).toStrictEqual([{ n: 0 }]);
      // Out of the transaction, a lost connection is connected again as ever.
      expect((await session.query<{ n: number }>('SELECT 1 AS n')).rows).toStrictEqual([{ n: 1 }]);
    } finally {
      await session.end();
    }
  });

  // The database's default isolation REPEATABLE READ (a team's choice): a statement on its own that
  // meets another session's update of its row is rolled back by the server (40001), and is sent again;
  // a transaction of enrich's own is READ COMMITTED, whatever the default.
  it('sends a lone statement again after a serialization failure; its own transactions are READ COMMITTED', async () => {
    const url = await freshDatabase();
    pgRan++;
    await sql(url, `ALTER DATABASE ${new URL(url).pathname.slice(1)} SET default_transaction_isolation = 'repeatable read'`);
    await sql(url, 'CREATE TABLE t (id int PRIMARY KEY, n int); INSERT INTO t VALUES (1, 0)');
    const session = new Session(url, await connect(client(url)), 5_000, 5_000);
    const other = await connect(client(url));
    try {
      await other.query('BEGIN');
      await other.query('UPDATE t SET n = n + 1 WHERE id = 1');
      const waiting = session.query('UPDATE t SET n = n + 10 WHERE id = 1');
      while ((await sql(url, "SELECT 1 FROM pg_stat_activity WHERE query LIKE 'UPDATE t SET n = n + 10%' AND wait_event_type = 'Lock'")).length === 0);
      await other.query('COMMIT');
      // Before: "could not serialize access due to concurrent update", an unexpected error (exit 1).
      expect((await waiting).rowCount).toBe(1);
      expect(await sql(url, 'SELECT n FROM t')).toStrictEqual([{ n: 11 }]);
      const level = await inTransaction(session, () => session.query<{ transaction_isolation: string }>('SHOW transaction_isolation'));
      expect(level.rows).toStrictEqual([{ transaction_isolation: 'read committed' }]);
    } finally {
      await other.end();
      await session.end();
    }
  });

  it('opens no connection for a statement sent after the session ended, nor waits to reconnect', async () => {
    const url = await freshDatabase();
    pgRan++;
    // A budget of an hour: taken for a lost connection, the statement would be retried past any test's time.
    const session = new Session(url, await connect(client(url)), 3_600_000, 5_000);
    await session.end();
    const error = await session.query('SELECT 1').catch((e: unknown) => e);
    expect(error).toMatchObject({ kind: 'failure', message: 'the session with the team store had ended; the statement was not sent' });
    expect(isConnectionLoss(error)).toBe(false);
  });

  it('reports a transaction lost under a statement as unavailable; its ROLLBACK does not wait', async () => {
    const url = await freshDatabase();
    pgRan++;
    const first = await connect(client(url));
    const session = new Session(url, first, 60_000, 5_000);
    try {
      await session.query('BEGIN');
      const pid = (await session.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid;
      const pending = session.query('SELECT 7 AS n, pg_sleep(5)');
      while ((await sql(url, "SELECT 1 FROM pg_stat_activity WHERE query LIKE 'SELECT 7 AS n%'")).length === 0);
      await sql(url, 'SELECT pg_terminate_backend($1)', [pid]);
      // Before: pg's own error (exit 1, "unexpected error"), not the store's.
      await expect(pending).rejects.toMatchObject({ kind: 'unavailable', message: expect.stringMatching(/and the transaction it was in with it/) as unknown });
      // Nothing to undo: answered at once (a budget of a minute would show as a hang).
      expect((await session.query('ROLLBACK')).command).toBe('ROLLBACK');
    } finally {
      await session.end();
    }
  });

  it('fails the run once when its lease cannot be renewed; later writes fail without a wait', async () => {
    await throughProxy(300, async (run, proxy) => {
      await run.append(intent('acme.com'), true);
      proxy.cut();
      const error = (await run.renewLease().then(() => null, (e: unknown) => e)) as Error & { kind: string };
      expect(error).toMatchObject({ kind: 'unavailable' });
      // Before: each of these waited out the reconnect budget again (the run took twice as long to exit).
      await expect(run.append(intent('bolt.com'), true)).rejects.toBe(error);
      await expect(run.flush()).rejects.toBe(error);
      await run.releaseClaims();
      await run.endRun({ status: 'failed', credits: 0, bought: 0, reused: 0 });
    });
  });

  it('stops when the store stays away too long: unavailable, host named, never the password', async () => {
    await throughProxy(300, async (run, proxy, url) => {
      await run.append(intent('acme.com'), true);
      proxy.cut();
      const error = (await run.append(intent('bolt.com'), true).then(() => null, (e: unknown) => e)) as Error & { kind: string };
      expect(error).toMatchObject({ kind: 'unavailable' });
      expect(error.message).toMatch(/^lost the team store at 127\.0\.0\.1:\d+ \(.*\) and could not reach it again within 0\.3 s; no further paid call was made/);
      expect(error.message).not.toContain(new URL(url).password);
      // Nothing further is written once it has failed.
      await expect(run.append(hit('acme.com'))).rejects.toBe(error);
    });
  });
});
