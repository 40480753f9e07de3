import { existsSync, writeFileSync } from 'node:fs';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../src/sandbox/index.js';
import { csvText, tempDir } from './helpers/cli.js';
import { freshDatabase } from './helpers/postgres.js';
import { spawnCli } from './helpers/spawn.js';

/**
 * One team store, machines whose clocks disagree by an hour (libfaketime, Debian's `faketime`):
 * every time a run stamps or compares is the store's, so no company is bought twice for a skew.
 * .ci/run installs faketime and fails if this file was skipped (ENRICH_TEST_FAKETIME_MARKER).
 */
const LIB = ['/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1', '/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1', '/usr/lib/faketime/libfaketime.so.1'].find((p) => existsSync(p));
if (LIB === undefined) process.stderr.write('test/team-clock.test.ts: skipped, libfaketime is missing (apt-get install faketime)\n');

const KEY = 'sk_test_team_clock';
let sb: Sandbox;
let dir: ReturnType<typeof tempDir>;
let ran = 0;

beforeEach(async () => {
  sb = await startSandbox({ keys: [{ key: KEY }] });
  dir = tempDir('enrich-clock-');
});
afterEach(async () => {
  await sb.close();
  dir.cleanup();
});
afterAll(() => {
  const marker = process.env['ENRICH_TEST_FAKETIME_MARKER'];
  if (marker !== undefined && marker !== '' && ran > 0) writeFileSync(marker, `${ran} clock-skew scenarios\n`, { flag: 'a' });
});

type Skew = '+0' | '+1h' | '-1h';

/** The batch as a machine named `host` whose clock is off by `skew`, on the team store. */
async function run(host: Skew, store: string, input: string, extra: string[]): Promise<number> {
  const env = {
    ENRICH_HOST: `host${host}`,
    ENRICH_BASE_URL: sb.url,
    ENRICH_API_KEY: KEY,
    LD_PRELOAD: LIB,
    FAKETIME: host === '+0' ? '+0' : host,
    // Timers run on the monotonic clock, which stays true.
    FAKETIME_DONT_FAKE_MONOTONIC: '1',
  };
  const p = spawnCli([input, '--store', store, '-o', dir.file(`out-${ran}-${host}.csv`), '--quiet', ...extra], { env });
  const code = await p.exited;
  expect([0, 4], p.stderr()).toContain(code);
  return code;
}

const charges = (): number[] => [...sb.chargesByDomain(KEY).values()];

describe.skipIf(LIB === undefined)('a team whose clocks disagree by an hour', () => {
  it.each([
    ['+0', '+1h'],
    ['+0', '-1h'],
    ['-1h', '+0'],
    ['+1h', '-1h'],
  ] as const)('a record host %s bought is fresh for host %s under --max-age 1h: nothing bought again', async (buyer, other) => {
    const store = await freshDatabase();
    const domains = [...sb.directory].slice(0, 8).map((c) => c.domain);
    const input = dir.file('in.csv', csvText([['domain'], ...domains.map((d) => [d])]));
    expect(await run(buyer, store, input, [])).toBe(0);
    expect(await run(other, store, input, ['--max-age', '1h'])).toBe(0);
    expect(charges()).toStrictEqual(domains.map(() => 1));
    ran++;
  });

  it('ledger prune on a host an hour fast measures ages by the store clock', async () => {
    const store = await freshDatabase();
    const domains = [...sb.directory].slice(0, 4).map((c) => c.domain);
    const input = dir.file('in.csv', csvText([['domain'], ...domains.map((d) => [d])]));
    expect(await run('+0', store, input, [])).toBe(0);
    const p = spawnCli(['ledger', 'prune', '--older-than', '30m', '--dry-run', '--json', '--store', store], { env: { LD_PRELOAD: LIB, FAKETIME: '+1h', FAKETIME_DONT_FAKE_MONOTONIC: '1' } });
    expect(await p.exited, p.stderr()).toBe(0);
    expect(JSON.parse(p.stdout())).toMatchObject({ dry_run: true, companies: 0 });
    ran++;
  });

  it('the --fresh --max-credits 1 rerun loop, passed from host to host, buys each company once', async () => {
    const store = await freshDatabase();
    const domains = [...sb.directory].slice(0, 6).map((c) => c.domain);
    const input = dir.file('in.csv', csvText([['domain'], ...domains.map((d) => [d])]));
    const hosts: Skew[] = ['+0', '+1h', '-1h'];
    let code = 4;
    for (let i = 0; code === 4; i++) {
      expect(i, 'the loop ends once every company is bought').toBeLessThan(domains.length + 2);
      code = await run(hosts[i % hosts.length] as Skew, store, input, ['--fresh', '--max-credits', '1']);
    }
    expect(charges()).toStrictEqual(domains.map(() => 1));
    ran++;
  });
});
