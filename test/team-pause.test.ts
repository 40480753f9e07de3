import { afterEach, beforeEach, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../src/sandbox/index.js';
import { csvText, runCli, tempDir } from './helpers/cli.js';
import { freshDatabase, sql } from './helpers/postgres.js';
import { spawnCli, type Spawned } from './helpers/spawn.js';

/**
 * A machine paused past its lease (a laptop's lid closed mid-run: SIGSTOP, then SIGCONT) on the
 * team store. Its lease is made to lapse on the server's clock while it is stopped, as the
 * minutes would, so the test waits on progress, not on the 45 s lease.
 */
const KEY = 'sk_test_team_pause';
let sb: Sandbox;
let dir: ReturnType<typeof tempDir>;
const running: Spawned[] = [];

beforeEach(async () => {
  sb = await startSandbox({ keys: [{ key: KEY }], latencyMs: 40 });
  dir = tempDir('enrich-pause-');
});
afterEach(async () => {
  for (const p of running.splice(0)) if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL');
  await sb.close();
  dir.cleanup();
});

const paidCalls = (): number => [...sb.stats.enrichCalls.values()].reduce((a, b) => a + b, 0);

// Each company is charged once, and both runs end.
it('a run paused past its lease writes nothing over the run that took its claims', async () => {
  const store = await freshDatabase();
  const domains = [...sb.directory].slice(0, 40).map((c) => c.domain);
  const input = dir.file('in.csv', csvText([['domain'], ...domains.map((d) => [d])]));
  const machine = (host: string): Spawned => {
    const p = spawnCli([input, '-o', dir.file(`${host}.csv`), '--quiet', '--concurrency', '4'], { env: { ENRICH_HOST: host, ENRICH_BASE_URL: sb.url, ENRICH_API_KEY: KEY, ENRICH_STORE: store } });
    running.push(p);
    return p;
  };
  const laptop = machine('laptop-a');
  // Stopped mid-purchase: some calls answered, others in flight or claimed and not yet sent.
  await expect.poll(paidCalls, { timeout: 60_000, interval: 5 }).toBeGreaterThanOrEqual(6);
  laptop.child.kill('SIGSTOP');
  await sql(store, "UPDATE runs SET heartbeat_at = heartbeat_at - 120000 WHERE host = 'laptop-a'");
  const cron = machine('cron-b');
  const code = await cron.exited;
  // Should a company be held from it, say by what: the sessions of the store and what each is doing.
  const sessions = code === 0 ? [] : await sql(store, "SELECT application_name, state, wait_event_type, left(query, 120) AS query FROM pg_stat_activity WHERE datname = current_database()");
  expect(code, `${cron.stderr()}\n${JSON.stringify(sessions)}`).toBe(0);
  laptop.child.kill('SIGCONT');
  expect([0, 3], laptop.stderr()).toContain(await laptop.exited);
  expect([...sb.chargesByDomain(KEY).values()].every((n) => n === 1)).toBe(true);
  expect(sb.chargesByDomain(KEY).size).toBe(domains.length);
  expect(await sql(store, "SELECT domain FROM purchases WHERE outcome = 'open'")).toStrictEqual([]);
  expect(await sql(store, 'SELECT count(*)::int AS n FROM companies')).toStrictEqual([{ n: domains.length }]);
});

it('a run paused past its lease while the store is pruned stops at its next purchase, exit 6, repeating no key', async () => {
  const store = await freshDatabase();
  const domains = [...sb.directory].slice(0, 120).map((c) => c.domain);
  const input = dir.file('in.csv', csvText([['domain'], ...domains.map((d) => [d])]));
  const laptop = spawnCli([input, '-o', dir.file('laptop.csv'), '--concurrency', '4'], { env: { ENRICH_HOST: 'laptop-a', ENRICH_BASE_URL: sb.url, ENRICH_API_KEY: KEY, ENRICH_STORE: store } });
  running.push(laptop);
  // Stopped with purchases closed in the store, which the prune forgets (and so moves the key epoch on).
  const closed = async (): Promise<number> => (await sql<{ n: number }>(store, "SELECT count(*)::int AS n FROM purchases WHERE outcome = 'hit'").catch(() => []))[0]?.n ?? 0;
  await expect.poll(closed, { timeout: 60_000, interval: 5 }).toBeGreaterThanOrEqual(6);
  laptop.child.kill('SIGSTOP');
  await sql(store, "UPDATE runs SET heartbeat_at = heartbeat_at - 120000 WHERE host = 'laptop-a'");
  const prune = await runCli(['ledger', 'prune', '--older-than', '0d', '--store', store]);
  expect(prune.code, prune.stderr).toBe(0);
  const before = paidCalls();
  laptop.child.kill('SIGCONT');
  // Before: it went on buying under keys of the old epoch, which the service answered with their old records, for nothing.
  expect(await laptop.exited, laptop.stderr()).toBe(6);
  expect(laptop.stderr()).toContain('the store was pruned while this run was paused');
  // At most the calls it had sent or claimed before the stop went out after it.
  expect(paidCalls() - before).toBeLessThanOrEqual(4);
});
