import { createServer as createHttpServer } from 'node:http';
import { createServer } from 'node:net';
import { symlinkSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ServiceClient } from '../src/api/client.js';
import { InternalServerError, InvalidTokenError, RateLimitedError } from '../src/api/errors.js';
import { keyCheck, storeCheck } from '../src/commands/doctor-checks.js';
import { startSandbox, type Sandbox } from '../src/sandbox/index.js';
import { Store } from '../src/store/sqlite/store.js';
import { runCli, tempDir } from './helpers/cli.js';
import { runProcess } from './helpers/spawn.js';

const KEY = 'sk_test_doctor_ok';
const NO_SCOPE = 'sk_test_doctor_noscope';
let sb: Sandbox;
let dir: ReturnType<typeof tempDir>;

beforeAll(async () => {
  // A frozen clock: the token bucket never refills, so the rate probe meets a 429 after exactly
  // the burst, however fast or slow this machine is.
  sb = await startSandbox({ keys: [{ key: KEY }, { key: NO_SCOPE, scopes: [] }], rateLimit: 1_000, burst: 1_000, now: () => 0 });
  dir = tempDir();
});
afterAll(async () => {
  await sb.close();
  dir.cleanup();
});

const doctor = (args: string[], env: Record<string, string> = {}) =>
  runCli(['doctor', ...args], { env: { ENRICH_BASE_URL: sb.url, ENRICH_API_KEY: KEY, ENRICH_STORE: dir.file('store.sqlite'), ...env } });

/** The report's lines as { label: [status, text] }. */
function report(stdout: string): Map<string, [string, string]> {
  const lines = stdout.trimEnd().split('\n').slice(0, -1);
  return new Map(lines.map((l) => /^ {2}(\S+) +(ok|note|FIX) +(.*)$/.exec(l)).map((m) => [m?.[1] ?? '?', [m?.[2] ?? '?', m?.[3] ?? '?']]));
}

/** A port on 127.0.0.1 that nothing listens on: bound, then released. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

describe('enrich doctor over real HTTP', () => {
  it('says ok on every line and exits 0 when all is well, spending nothing', async () => {
    const before = sb.balance(KEY);
    // A real store: doctor opens it and has SQLite check every page (issue 19 item 7).
    Store.open(dir.file('store.sqlite'), { tool: 'test' }).close();
    const r = await doctor([]);
    expect(r.code, r.stdout).toBe(0);
    const lines = report(r.stdout);
    expect([...lines.keys()]).toEqual(['address', 'reachable', 'key', 'endpoints', 'latency', 'store']);
    for (const [status] of lines.values()) expect(status).toBe('ok');
    expect(lines.get('address')?.[1]).toContain('plain http: allowed only because 127.0.0.1 is this machine');
    expect(lines.get('key')?.[1]).toContain('accepted with scope search:read');
    expect(lines.get('endpoints')?.[1]).toBe('callable: GET /company/match (beta), POST /company/enrich (beta)');
    expect(lines.get('latency')?.[1]).toMatch(/^\d+ ms median over 2 requests/);
    expect(lines.get('store')?.[1]).toMatch(new RegExp(`^${dir.file('store.sqlite')} \\(\\d+\\.\\d KiB; SQLite's integrity check: ok\\)$`));
    expect(r.stdout.trimEnd().split('\n').at(-1)).toBe('enrich doctor: all ok');
    expect(sb.balance(KEY)).toBe(before);
  });

  it('a refused key (401) is a fix with exit 5, and the key never shows', async () => {
    const r = await doctor([], { ENRICH_API_KEY: 'sk_wrong_key_xyz' });
    expect(r.code).toBe(5);
    expect(report(r.stdout).get('key')).toEqual(['FIX', 'refused (401 invalid_token): check ENRICH_API_KEY or --api-key-file']);
    expect(r.stdout + r.stderr).not.toContain('sk_wrong_key_xyz');
  });

  it('a key without search:read (403) is a fix with exit 5', async () => {
    const r = await doctor([], { ENRICH_API_KEY: NO_SCOPE });
    expect(r.code).toBe(5);
    expect(report(r.stdout).get('key')?.[0]).toBe('FIX');
    expect(report(r.stdout).get('key')?.[1]).toContain('lacks the search:read scope (403 insufficient_scope)');
  });

  it('an address nobody answers (refused, or a name that cannot resolve) is exit 6', async () => {
    const port = await closedPort();
    const refused = await doctor([], { ENRICH_BASE_URL: `http://127.0.0.1:${port}` });
    expect(refused.code).toBe(6);
    expect(report(refused.stdout).get('reachable')).toEqual(['FIX', `cannot reach http://127.0.0.1:${port} (ECONNREFUSED): check ENRICH_BASE_URL, DNS, a firewall or proxy`]);
    expect(report(refused.stdout).has('key')).toBe(false);
    const nowhere = await doctor([], { ENRICH_BASE_URL: 'https://enrich-doctor.invalid' });
    expect(nowhere.code).toBe(6);
    expect(report(nowhere.stdout).get('reachable')?.[1]).toMatch(/^cannot reach https:\/\/enrich-doctor\.invalid \(/);
  });

  it('a service that answers 5xx (down behind its gateway) is exit 6 too', async () => {
    const down = createHttpServer((_req, res) => res.writeHead(503, { 'content-type': 'text/html' }).end('<h1>Service Unavailable</h1>'));
    await new Promise<void>((resolve) => down.listen(0, '127.0.0.1', resolve));
    try {
      const url = `http://127.0.0.1:${(down.address() as { port: number }).port}`;
      const r = await doctor([], { ENRICH_BASE_URL: url });
      expect(r.code).toBe(6);
      expect(report(r.stdout).get('reachable')).toEqual(['FIX', `${url} answered HTTP 503: the service is down or failing behind its gateway; try again later`]);
    } finally {
      await new Promise<void>((resolve) => down.close(() => resolve()));
    }
  });

  it('a wrong base path is exit 6 as for a batch run, and not blamed on the key', async () => {
    const r = await doctor([], { ENRICH_BASE_URL: `${sb.url}/wrong/prefix` });
    expect(r.code, r.stdout).toBe(6);
    // The fix is on the reachable row (not "reachable ok (HTTP 404)", not on the key's).
    expect(report(r.stdout).get('reachable')).toEqual(['FIX', `${sb.url} answers, but not as the service API (HTTP 404 at /wrong/prefix/api/v1/public/openapi.json and the match endpoint): check the base path in ENRICH_BASE_URL`]);
    expect(report(r.stdout).get('key')).toEqual(['note', 'not checked: no service API at this address']);
  });

  it('a free match answered 500 is exit 6 (the service is failing), not a fix to the key', async () => {
    const failing = await startSandbox({ keys: [{ key: KEY }], failRate: 1 });
    try {
      const r = await doctor([], { ENRICH_BASE_URL: failing.url });
      expect(r.code, r.stdout).toBe(6);
      expect(report(r.stdout).get('key')).toEqual(['FIX', 'not checked: the service answered 500 internal to a free match; it is down or failing, try again later']);
    } finally {
      await failing.close();
    }
  });

  it('usage problems are fixes, exit 2: no address, http elsewhere, no key, a folder as store', async () => {
    expect((await doctor([], { ENRICH_BASE_URL: '' })).code).toBe(2);
    const http = await doctor(['--base-url', 'http://data.example.invalid']);
    expect(http.code).toBe(2);
    expect(report(http.stdout).get('address')?.[1]).toContain('use https://');
    const noKey = await doctor([], { ENRICH_API_KEY: '' });
    expect(noKey.code).toBe(2);
    expect(report(noKey.stdout).get('key')?.[1]).toMatch(/^no API key/);
    const store = await doctor([], { ENRICH_STORE: dir.path });
    expect(store.code).toBe(2);
    expect(report(store.stdout).get('store')?.[1]).toBe(`${dir.path} is a directory; --store (or ENRICH_STORE) takes a file path`);
  });

  it('probes the rate ceiling only when asked, with free matches, and stops at the first 429', async () => {
    const probe = await startSandbox({ keys: [{ key: KEY }], rateLimit: 10, burst: 10, now: () => 0 });
    try {
      const r = await doctor(['--probe-rate', '50'], { ENRICH_BASE_URL: probe.url });
      expect(r.code, r.stdout).toBe(0);
      // The key check takes one token, the probe gets the other nine.
      expect(report(r.stdout).get('rate')?.[1]).toMatch(/^first 429 after 9 free matches \(.*\), Retry-After \d+s/);
      expect(probe.stats.byStatus[429]).toBeLessThanOrEqual(4);
      const capped = await doctor(['--probe-rate', '3']);
      expect(report(capped.stdout).get('rate')?.[1]).toMatch(/^no 429 in 3 free matches/);
      expect(report((await doctor([])).stdout).has('rate')).toBe(false);
    } finally {
      await probe.close();
    }
  });

  it('a rate probe that meets a 500 stops there and says so, without failing the check', async () => {
    // Seeded faults: the key check's match succeeds, a later one is a 500.
    const flaky = await startSandbox({ keys: [{ key: KEY }], failRate: 0.5, seed: 3 });
    try {
      const r = await doctor(['--probe-rate', '50'], { ENRICH_BASE_URL: flaky.url });
      expect(report(r.stdout).get('key')?.[0], r.stdout).toBe('ok');
      expect(report(r.stdout).get('rate')).toEqual(['note', expect.stringMatching(/^stopped after \d+ free match(es)?: the service answered 500 internal$/)]);
      expect(r.code).toBe(0);
    } finally {
      await flaky.close();
    }
  });

  it('works against the embedded sandbox, as a process, and its help has examples', async () => {
    const r = await runProcess(['doctor', '--sandbox'], { env: { ENRICH_STORE: dir.file('p.sqlite') } });
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toContain('enrich doctor: all ok');
    const help = await runProcess(['doctor', '--help']);
    expect(help.stdout).toContain('Examples:');
    expect(help.stdout).toContain('enrich doctor --probe-rate 50');
  });
});

describe('the key check, as the service answers it', () => {
  const refusing = (error: Error): ServiceClient => ({ match: () => Promise.reject(error) }) as unknown as ServiceClient;
  const problem = (status: number, code: string) => ({ status, code, message: code, requestId: undefined, problem: undefined, definitive: true });

  it("names the service's own code for a refused key, as a batch run does", async () => {
    expect(await keyCheck(refusing(new InvalidTokenError(problem(401, 'key_suspended'))), [])).toMatchObject({
      status: 'fail',
      kind: 'auth',
      text: 'refused (401 key_suspended): check ENRICH_API_KEY or --api-key-file',
    });
    // Shown, never obeyed: a code carrying terminal escapes is printed without them.
    const hostile = await keyCheck(refusing(new InvalidTokenError(problem(401, 'key_\u001b[2J\u001b[31msuspended\u0007'))), []);
    expect(hostile.text).toBe('refused (401 key_ [2J [31msuspended): check ENRICH_API_KEY or --api-key-file');
    const failing = await keyCheck(refusing(new InternalServerError(problem(500, 'x\u001b]2;PWNED\u0007'))), []);
    expect(failing.text).toBe('not checked: the service answered 500 x ]2;PWNED to a free match; it is down or failing, try again later');
    const blank = await keyCheck(refusing(new InvalidTokenError(problem(401, '\u001b\u0007'))), []);
    expect(blank.text).toBe('refused (401 ?): check ENRICH_API_KEY or --api-key-file');
  });

  it('stops as a batch would (exit 6) when asked to wait longer than a batch waits', async () => {
    expect(await keyCheck(refusing(new RateLimitedError(problem(429, 'rate_limited'), 86_400)), [])).toMatchObject({
      status: 'fail',
      kind: 'unavailable',
      text: 'not checked: the service asks to wait 24 h (429 rate_limited); a batch would stop too, rerun later',
    });
    expect(await keyCheck(refusing(new RateLimitedError(problem(429, 'rate_limited'), 2)), [])).toMatchObject({
      kind: 'failure',
      text: 'not checked: rate limited (429); run enrich doctor again in 2s',
    });
  });
});

describe('the store check', () => {
  it('says a store cannot be made past a dangling link, as a batch would find', async () => {
    const link = dir.file('state-link');
    symlinkSync(dir.file('nowhere'), link);
    expect(await storeCheck(`${link}/x/enrich/store.db`, null)).toMatchObject({ status: 'fail', kind: 'usage', text: `${link}/x/enrich/store.db cannot be created: ${link} is not a folder` });
    // The store itself a link into a folder that is not there: SQLite would have to make the target.
    const storeLink = dir.file('store-link.db');
    symlinkSync(dir.file('gone/store.db'), storeLink);
    expect(await storeCheck(storeLink, null)).toMatchObject({ status: 'fail', text: `${storeLink} cannot be created: it is a link to ${dir.file('gone/store.db')}, in a folder that does not exist` });
  });
});
