import { readFileSync, symlinkSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ExitCode, formatWait } from '../src/errors.js';
import { startSandbox, type Sandbox } from '../src/sandbox/index.js';
import { hostileServer, json, type Hostile } from './helpers/hostile.js';
import { runCli, tempDir } from './helpers/cli.js';
import { spawnCli } from './helpers/spawn.js';

const KEY = 'sk_test_cli_edges';
let dir: ReturnType<typeof tempDir>;
let sb: Sandbox;
beforeAll(async () => {
  dir = tempDir();
  sb = await startSandbox({ keys: [{ key: KEY }] });
});
afterAll(async () => {
  await sb.close();
  dir.cleanup();
});

describe('an API key that cannot go in an HTTP header', () => {
  it.each([
    ['non-ASCII', 'sk_live_tëst_0123456789'],
    ['a control character', 'sk_live_\u0007bell_0123456789'],
  ])('is refused at start when it has %s: exit 2, one line, no key shown', async (_what, key) => {
    const input = dir.file('k.csv', 'domain\nacme.com\n');
    const run = await runCli([input], { env: { ENRICH_BASE_URL: sb.url, ENRICH_API_KEY: key } });
    expect(run.code).toBe(ExitCode.USAGE);
    expect(run.stderr).toBe('enrich: the API key from ENRICH_API_KEY contains a non-ASCII or control character; check it was copied whole (the key is not shown)\n');
    expect(run.stdout).toBe('');
    expect(sb.stats.requests).toBe(0);
  });

  it('from a key file too', async () => {
    const file = dir.file('key.txt', 'sk_live_ключ_0123456789\n');
    const run = await runCli([dir.file('k.csv', 'domain\nacme.com\n'), '--api-key-file', file], { env: { ENRICH_BASE_URL: sb.url } });
    expect(run.code).toBe(ExitCode.USAGE);
    expect(run.stderr).toContain(`the API key from ${file} contains a non-ASCII or control character`);
  });
});

describe('auth and credit stops with codes the spec does not name', () => {
  let server: Hostile;
  let answer: 'suspended' | 'capped' | 'insufficient' = 'suspended';
  beforeAll(async () => {
    server = await hostileServer((req, res) => {
      if (answer === 'suspended') json(res, 403, { type: 'x/key_suspended', title: 'Suspended', status: 403, code: 'key_suspended', detail: `key suspended\u001b[2J for abuse` });
      else if (req.method === 'GET') json(res, 200, { matched: true, credits_charged: 0, company: { domain: 'acme.com', name: 'Acme' } });
      else json(res, 402, { type: `x/${code402()}`, title: 'Cap', status: 402, code: code402(), detail: 'monthly cap reached' });
    });
  });
  afterAll(() => server.close());
  const code402 = (): string => (answer === 'capped' ? 'plan_cap_reached' : 'insufficient_credits');

  it("403 key_suspended stops as an auth failure (exit 5) with the service's code", async () => {
    answer = 'suspended';
    const input = dir.file('s.csv', 'domain\nacme.com\nbeta.com\n');
    const run = await runCli([input, '-o', dir.file('s.out.csv')], { env: { ENRICH_BASE_URL: server.url, ENRICH_API_KEY: KEY } });
    expect(run.code).toBe(ExitCode.AUTH);
    // The line that matters comes first, before the summary.
    expect(run.stderr.split('\n')[0]).toMatch(/^enrich: the service refused the API key: key_suspended \(HTTP 403\): key suspended \[2J for abuse;/);
    expect(run.stderr).not.toContain('invalid_token');
    expect(run.stderr).not.toContain('\u001b');
  });

  it('402 plan_cap_reached stops the run for credits exactly as insufficient_credits does', async () => {
    const outcome = async (which: 'capped' | 'insufficient') => {
      answer = which;
      const input = dir.file(`${which}.csv`, 'domain\nacme.com\n');
      const out = dir.file(`${which}.out.csv`);
      const run = await runCli([input, '-o', out], { env: { ENRICH_BASE_URL: server.url, ENRICH_API_KEY: KEY } });
      // (The rows' status comes from the pipeline's record of the code: the lead's part, not checked here.)
      expect(readFileSync(out, 'utf8')).toContain(code402());
      return { code: run.code, next: run.stderr.split('\n').at(-2) };
    };
    const known = await outcome('insufficient');
    const unknown = await outcome('capped');
    expect(known.code).toBe(ExitCode.CREDITS);
    expect(unknown).toStrictEqual(known);
  });
});

describe('a 402 on the free match', () => {
  it('does not say "needs 0 more credits"', async () => {
    const server = await hostileServer((_req, res) => json(res, 402, { type: 'x/insufficient_credits', title: 'No', status: 402, code: 'insufficient_credits', balance: 0, required: 0 }));
    try {
      const input = dir.file('m402.csv', 'domain\nacme.com\n');
      const run = await runCli([input, '-o', dir.file('m402.out.csv')], { env: { ENRICH_BASE_URL: server.url, ENRICH_API_KEY: KEY } });
      expect(run.code).toBe(ExitCode.CREDITS);
      expect(run.stderr).not.toContain('needs 0 more credits');
      expect(run.stderr).toContain('enrich: the service refused even the free match for credits (insufficient_credits): the account has no credits or is blocked;');
    } finally {
      await server.close();
    }
  });
});

describe('paths', () => {
  it('refuses -o as a dangling symlink to where the store will be', async () => {
    const input = dir.file('l.csv', 'domain\nacme.com\n');
    const link = dir.file('l.out.csv');
    const store = dir.file('not-yet.db');
    symlinkSync(store, link);
    const run = await runCli([input, '-o', link, '--store', store], { env: { ENRICH_BASE_URL: sb.url, ENRICH_API_KEY: KEY } });
    expect(run.code).toBe(ExitCode.USAGE);
    expect(run.stderr).toMatch(/^enrich: -o and the store are the same file/);
  });
});

describe('exit 6: the service is unavailable', () => {
  it('is a documented, distinct exit code with one-line messages', async () => {
    expect(ExitCode.UNAVAILABLE).toBe(6);
    expect(new Set(Object.values(ExitCode)).size).toBe(Object.values(ExitCode).length);
    expect([formatWait(45), formatWait(600), formatWait(5400), formatWait(86_400 * 3)]).toStrictEqual(['45 s', '10 min', '1.5 h', '3 days']);
    const help = await runCli(['--help']);
    expect(help.stdout).toContain('6 service unreachable or asks to wait too long');
  });
});

describe('signals', () => {
  it('SIGHUP stops gracefully like SIGTERM: exit 130, and the same command resumes', async () => {
    const slow = await startSandbox({ keys: [{ key: KEY }], latencyMs: 300 });
    try {
      const domains = [...slow.directory].slice(0, 30).map((c) => c.domain);
      const input = dir.file('hup.csv', `domain\n${domains.join('\n')}\n`);
      const env = { ENRICH_BASE_URL: slow.url, ENRICH_API_KEY: KEY };
      const p = spawnCli([input, '-o', dir.file('hup.out.csv'), '--concurrency', '2'], { env });
      // Triggered by progress, not the clock: once the run is talking to the service.
      while (slow.stats.requests < 1) await new Promise((r) => setTimeout(r, 20));
      p.child.kill('SIGHUP');
      expect(await p.exited).toBe(ExitCode.INTERRUPTED);
      expect(p.stderr()).toContain('SIGHUP: stopping; requests already sent finish and what they buy is kept');
      slow.setLatency(0);
      const rerun = await runCli([input, '-o', dir.file('hup.out.csv')], { env });
      expect(rerun.code, rerun.stderr).toBe(0);
    } finally {
      await slow.close();
    }
  });
});
