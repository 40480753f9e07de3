import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../src/sandbox/index.js';
import { csvText, runCli, tempDir } from './helpers/cli.js';
import { hostileServer } from './helpers/hostile.js';
import { batchOptions, runQuietBatch } from './helpers/batch.js';

/** "Service down" is told apart from "3 rows failed": one line naming the host and cause, exit 6. */
const KEY = 'sk_test_unavailable';
let dir: ReturnType<typeof tempDir>;
beforeEach(() => {
  dir = tempDir();
});
afterEach(() => dir.cleanup());

const input = (n = 40): string => dir.file('in.csv', csvText([['domain'], ...Array.from({ length: n }, (_, i) => [`company-${i}.com`])]));

/** A port nothing listens on: bound, then closed. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

describe('a service that cannot be reached stops the run with one line and exit 6', () => {
  it('DNS: names the host and the cause, writes nothing, and buys nothing', async () => {
    const out = dir.file('out.csv');
    const run = await runCli([input(), '-o', out], { env: { ENRICH_BASE_URL: 'https://data.example.invalid', ENRICH_API_KEY: KEY } });
    expect(run.code).toBe(6);
    expect(run.stderr).toMatch(/^enrich: cannot reach data\.example\.invalid: DNS lookup failed; nothing more was sent, rerun the same command later\n$/);
  });

  it('connection refused: the same, at once', async () => {
    const port = await closedPort();
    const run = await runCli([input(), '-o', dir.file('out.csv')], { env: { ENRICH_BASE_URL: `http://127.0.0.1:${port}`, ENRICH_API_KEY: KEY } });
    expect(run.code).toBe(6);
    expect(run.stderr.trimEnd().split('\n')).toHaveLength(1);
    expect(run.stderr).toContain(`cannot reach 127.0.0.1`);
    expect(run.stderr).toContain('refused');
  });

  it('a wrong base path answers, but not as the service: exit 6, rows not marked not_found', async () => {
    const sb = await startSandbox({ keys: [{ key: KEY }] });
    try {
      const run = await runCli([input(), '-o', dir.file('out.csv')], { env: { ENRICH_BASE_URL: `${sb.url}/wrong/prefix`, ENRICH_API_KEY: KEY } });
      expect(run.code).toBe(6);
      expect(run.stderr).toContain('enrich: this address does not answer as the service API (HTTP 404 not_found on a documented endpoint); check the base URL (ENRICH_BASE_URL or --base-url) and rerun\n');
      expect(sb.stats.requests).toBeLessThanOrEqual(16);
    } finally {
      await sb.close();
    }
  });

  it('a Retry-After of a day is not waited out: "the service asks to wait 24 h", exit 6', async () => {
    const server = await hostileServer((_req, res) => {
      res.writeHead(429, { 'content-type': 'application/problem+json', 'retry-after': '86400' });
      res.end(JSON.stringify({ type: 'x/rate_limited', title: 'Slow down', status: 429, code: 'rate_limited', retryAfterSeconds: 86_400 }));
    });
    try {
      const run = await runCli([input(3), '-o', dir.file('out.csv')], { env: { ENRICH_BASE_URL: server.url, ENRICH_API_KEY: KEY } });
      expect(run.code).toBe(6);
      expect(run.stderr).toContain('the service asks to wait 24 h; rerun the same command later');
    } finally {
      await server.close();
    }
  });

  // Each Retry-After header and body, and the wait said for it.
  it.each([
    // Just over the 5 minutes a run waits out: said as over them, not as "5 min".
    [{ 'retry-after': '301' }, undefined, '5 min 1 s'],
    // An HTTP date in year 9999, and a body's 1e308 seconds: not millions of days.
    [{ 'retry-after': 'Fri, 31 Dec 9999 23:59:59 GMT' }, undefined, 'over a year'],
    [{}, 1e308, 'over a year'],
  ])('%j, body %s: says "wait %s"', async (headers, body, text) => {
    const server = await hostileServer((_req, res) => {
      res.writeHead(429, { 'content-type': 'application/problem+json', ...headers });
      res.end(JSON.stringify({ type: 'x/rate_limited', title: 'Slow down', status: 429, code: 'rate_limited', ...(body === undefined ? {} : { retryAfterSeconds: body }) }));
    });
    try {
      const run = await runCli([input(3), '-o', dir.file('out.csv')], { env: { ENRICH_BASE_URL: server.url, ENRICH_API_KEY: KEY } });
      expect(run.code).toBe(6);
      expect(run.stderr).toContain(`enrich: the service asks to wait ${text}; rerun the same command later\n`);
    } finally {
      await server.close();
    }
  });
});

describe('a service that answers 429 for ever', () => {
  it.each(['0', '-1', 'soon'])('with Retry-After: %s, stops once refused for longer than is worth waiting', async (retryAfter) => {
    const server = await hostileServer((_req, res) => {
      res.writeHead(429, { 'content-type': 'application/problem+json', 'retry-after': retryAfter });
      res.end(JSON.stringify({ type: 'x/rate_limited', title: 'Slow down', status: 429, code: 'rate_limited' }));
    });
    try {
      const result = await runQuietBatch(
        batchOptions(dir.path, input(200), { baseUrl: server.url, apiKey: KEY }, { concurrency: 4, retry: { maxAttempts: 6, maxRateLimitedAttempts: 3, baseDelayMs: 1, maxDelayMs: 2, maxRetryAfterSeconds: 1 } }),
      );
      expect(result.stop).toMatchObject({ reason: 'unavailable' });
      expect(result.stop?.reason === 'unavailable' ? result.stop.message : '').toMatch(
        /^the service answered every request with 429 \(rate limited\) for \d+ s, \d+ in a row; nothing more was sent, rerun the same command later$/,
      );
      // Not 200 domains x 3 attempts each: the run stopped once the refusals had lasted (1 s here).
      expect(server.requests).toBeLessThan(100);
    } finally {
      await server.close();
    }
  });
});

describe('a dry run whose free matches went unanswered', () => {
  it('exits 3 (a rerun may clear it), its estimate said as a lower bound, even with --quiet', async () => {
    const server = await hostileServer((req, res) => {
      if ((req.url ?? '').includes('domain=company-1.com')) {
        res.writeHead(500, { 'content-type': 'application/problem+json' });
        return void res.end(JSON.stringify({ type: 'x/internal', title: 'Internal', status: 500, code: 'internal' }));
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"matched":false,"credits_charged":0,"company":null}');
    });
    try {
      const run = await runCli([input(5), '--dry-run', '--quiet', '--summary-json', '-'], { env: { ENRICH_BASE_URL: server.url, ENRICH_API_KEY: KEY } });
      expect(run.code, run.stderr).toBe(3);
      expect(JSON.parse(run.stdout)).toMatchObject({ status: 'dry_run', errors: 1, unanswered_domains: 1 });
    } finally {
      await server.close();
    }
  });
});

describe('the circuit breaker', () => {
  let sb: Sandbox;
  afterEach(async () => sb.close());

  it('stops a run that was working once every call fails, and keeps what it had bought', async () => {
    sb = await startSandbox({ keys: [{ key: KEY }] });
    const domains = [...sb.directory].slice(0, 120).map((c) => c.domain);
    const path = dir.file('in.csv', csvText([['domain'], ...domains.map((d) => [d])]));
    // Triggered by progress: after 30 requests the service starts failing every call.
    const watcher = setInterval(() => {
      if (sb.stats.requests >= 30) sb.setFailRate(1);
    }, 1);
    try {
      const result = await runQuietBatch(
        batchOptions(dir.path, path, { baseUrl: sb.url, apiKey: KEY }, { concurrency: 4, retry: { maxAttempts: 100, maxRateLimitedAttempts: 4, baseDelayMs: 1, maxDelayMs: 2 } }),
      );
      expect(result.stop).toMatchObject({ reason: 'unavailable', worked: true });
      expect(result.stop?.reason === 'unavailable' ? result.stop.message : '').toMatch(/^the service stopped answering \(25 attempts in a row failed; last: internal/);
      // Far fewer calls than 120 domains with 100 attempts each would make.
      expect(sb.stats.requests).toBeLessThan(30 + 25 + 8);
      expect(result.summary.bought).toBe(sb.ledger(KEY).length);
      expect(result.summary.skipped).toBeGreaterThan(0);
    } finally {
      clearInterval(watcher);
    }
  });
});
