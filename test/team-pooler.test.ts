import { writeFileSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, inject, it } from 'vitest';
import pg from 'pg';
import { startSandbox, type Sandbox } from '../src/sandbox/index.js';
import { PgStore } from '../src/store/postgres/store.js';
import { csvText, tempDir } from './helpers/cli.js';
import { PGBOUNCER, startPgBouncer, type Pooler } from './helpers/pgbouncer.js';
import { advisoryLocks, freshDatabase, sql } from './helpers/postgres.js';
import { runProcess, spawnCli } from './helpers/spawn.js';

/**
 * The team store behind a real PgBouncer in transaction mode, the address teams copy from a
 * managed PostgreSQL's console: a session is not kept from one transaction to the next, so no
 * correctness may rest on one. .ci/run installs pgbouncer and fails if this file was skipped
 * (ENRICH_TEST_PGBOUNCER_MARKER).
 */
if (PGBOUNCER === undefined) process.stderr.write('test/team-pooler.test.ts: skipped, pgbouncer is missing (apt-get install pgbouncer)\n');

const KEY = 'sk_test_team_pooler';
let pooler: Pooler;
let sb: Sandbox;
let dir: ReturnType<typeof tempDir>;
let ran = 0;

beforeAll(async () => {
  if (PGBOUNCER !== undefined) pooler = await startPgBouncer(inject('postgresUrl'), 'transaction');
});
afterAll(async () => {
  await pooler?.stop();
  const marker = process.env['ENRICH_TEST_PGBOUNCER_MARKER'];
  if (marker !== undefined && marker !== '' && ran > 0) writeFileSync(marker, `${ran} pooler scenarios\n`, { flag: 'a' });
});
beforeEach(async () => {
  sb = await startSandbox({ keys: [{ key: KEY }], latencyMs: 2 });
  dir = tempDir('enrich-pooler-');
});
afterEach(async () => {
  await sb.close();
  dir.cleanup();
});

/** The batch as the machine `host`, on the store at `store`; its exit code and stderr. */
async function run(host: string, store: string, domains: readonly string[]): Promise<{ code: number; stderr: string }> {
  const input = dir.file(`${host}.csv`, csvText([['domain'], ...domains.map((d) => [d])]));
  const env = { ENRICH_HOST: host, ENRICH_BASE_URL: sb.url, ENRICH_API_KEY: KEY, ENRICH_STORE: store };
  const p = spawnCli([input, '-o', dir.file(`${host}.out.csv`), '--quiet', '--concurrency', '8'], { env });
  return { code: await p.exited, stderr: p.stderr() };
}

describe.skipIf(PGBOUNCER === undefined)('the team store through PgBouncer in transaction mode', () => {
  it('two machines on a fresh database, then a third on the union: each company charged once', async () => {
    const direct = await freshDatabase();
    const pooled = pooler.through(direct);
    const all = [...sb.directory].slice(0, 120).map((c) => c.domain);
    const [a, b] = [all.slice(0, 80), all.slice(40)];
    // Both migrate the empty database at once, then buy over the 40 companies they share.
    const [ra, rb] = await Promise.all([run('laptop-a', pooled, a), run('cron-b', pooled, b)]);
    expect(ra.code, ra.stderr).toBe(0);
    expect(rb.code, rb.stderr).toBe(0);
    const third = await run('laptop-c', pooled, all);
    expect(third.code, third.stderr).toBe(0);
    expect([...sb.chargesByDomain(KEY).values()]).toStrictEqual(all.map(() => 1));
    expect(sb.chargesByDomain(KEY).size).toBe(all.length);
    // Nothing left behind on the server: no open purchase, no advisory lock, no run left running.
    expect(await sql(direct, "SELECT domain FROM purchases WHERE outcome = 'open'")).toStrictEqual([]);
    expect(await advisoryLocks(direct, true)).toBe(0);
    expect(await sql(direct, "SELECT id FROM runs WHERE status = 'running'")).toStrictEqual([]);
    ran++;
  });

  it('refuses ledger copy, which holds a lock across transactions, in one line, leaving no lock', async () => {
    const laptop = dir.file('laptop.db');
    expect((await run('laptop', laptop, [...sb.directory].slice(0, 3).map((c) => c.domain))).code).toBe(0);
    const direct = await freshDatabase();
    const r = await runProcess(['ledger', 'copy', laptop, pooler.through(direct)]);
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/pools in transaction mode \(a session is not kept\); give the address of enrich_test_\w+ that keeps one \(direct, or a pooler in session mode\); nothing was copied/);
    expect(await advisoryLocks(direct, true)).toBe(0);
    ran++;
  });

  // A session holds the pool's only server connection.
  it('reports a pool with no free server connection as such (exit 6), not as a lost server', async () => {
    const small = await startPgBouncer(inject('postgresUrl'), 'transaction', 1);
    const direct = await freshDatabase();
    const pooled = small.through(direct);
    // The store made and a run begun while the pool has room; then another client holds its one server connection.
    const store = await PgStore.open(pooled, { tool: 'test', queryTimeoutMs: 1_500, reconnectMs: 1_000 });
    const holder = new pg.Client({ connectionString: pooled });
    try {
      const run = await store.beginRun('svc', { inputName: 'in.csv', inputSha256: 'x', rows: 1, dryRun: false, options: {} });
      await holder.connect();
      await holder.query('BEGIN');
      await holder.query('SELECT 1');
      const error = (await run.append({ type: 'intent', company: 'acme.com', generation: 1, keyVersion: 1, key: 'k-acme.com' }, true).then(() => null, (e: unknown) => e)) as Error & { kind: string };
      expect(error).toMatchObject({ kind: 'unavailable' });
      expect(error.message).toMatch(/^no answer from the team store at .* in 1\.5 s, nor again within 1 s: a pooler whose pool has no server connection free waits like this \(too small for the runs sharing it: raise its pool size/);
      expect(error.message).not.toContain('\n');
      ran++;
    } finally {
      await holder.end().catch(() => {});
      await store.close().catch(() => {});
      await small.stop();
    }
  });

  it('doctor names the pool mode it found, though an idle pooler hands the same session back', async () => {
    const r = await runProcess(['doctor', '--sandbox'], { env: { ENRICH_STORE: pooler.through(await freshDatabase()) } });
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^ {2}pool +ok +a pooler in transaction mode \(a session is not kept between transactions\)/m);
    ran++;
  });
});
