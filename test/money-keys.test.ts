import { readFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { csvText, readCsvFile, runCli, tempDir } from './helpers/cli.js';
import { hostileServer, json, type Hostile } from './helpers/hostile.js';

/**
 * What a lost paid answer proves, against scripted services the sandbox cannot play: one whose
 * problem documents carry a constant requestId, one whose idempotency layer fails. Over real
 * HTTP; the service's own count of charges is the proof.
 */
const KEY = 'sk_test_money_keys_0123';
let dir: ReturnType<typeof tempDir>;
let server: Hostile | undefined;
beforeEach(() => {
  dir = tempDir();
});
afterEach(async () => {
  await server?.close();
  server = undefined;
  dir.cleanup();
});

const record = (domain: string, remaining: number) => ({
  matched: true,
  credits_charged: 1,
  credits_remaining: remaining,
  company: { domain, name: 'Acme', website_url: null, description: null, industry: null, employee_count: 10, revenue_range: null, ownership_type: null, year_founded: null, specialties: [], hq_country: null, hq_city: null, last_updated: '2026-01-01T00:00:00Z' },
});
const problem = (res: ServerResponse, status: number, code: string, requestId: string): void =>
  json(res, status, { type: `https://errors.example/${code}`, title: code, status, code, requestId, ...(status === 402 ? { balance: 0, required: 1 } : {}) });

/**
 * A service for one company, acme.com: the match is free and always hits; the first enrich under
 * the first key is charged and its answer lost; `after(n)` answers that key's n-th retry; any
 * other key is charged (or refused with a 402 when `broke`).
 */
async function service(after: (res: ServerResponse, n: number, replay: () => void) => void, options: { broke?: boolean } = {}): Promise<{ charges: () => number }> {
  let charges = 0;
  let firstKey: string | null = null;
  let retries = 0;
  server = await hostileServer((req: IncomingMessage, res: ServerResponse) => {
    if (req.method === 'GET') return json(res, 200, { matched: true, credits_charged: 0, company: { domain: 'acme.com', name: 'Acme' } });
    const key = String(req.headers['idempotency-key']);
    firstKey ??= key;
    if (key === firstKey) {
      if (charges === 0) {
        charges++;
        res.socket?.destroy();
        return;
      }
      return after(res, ++retries, () => json(res, 200, record('acme.com', 99)));
    }
    if (options.broke === true) return problem(res, 402, 'insufficient_credits', `req-${Math.random()}`);
    charges++;
    json(res, 200, record('acme.com', 100 - charges));
  });
  return { charges: () => charges };
}

async function enrich(extra: string[] = []) {
  const input = dir.file('in.csv', csvText([['domain'], ['acme.com']]));
  const out = dir.file('out.csv');
  const summary = dir.file('summary.json');
  const run = await runCli([input, '-o', out, '--summary-json', summary, '--store', dir.file('store.db'), ...extra], { env: { ENRICH_BASE_URL: server?.url, ENRICH_API_KEY: KEY } });
  const totals = JSON.parse(readFileSync(summary, 'utf8')) as Record<string, number>;
  return { run, totals, rows: readCsvFile(out) };
}

describe('a lost paid answer', () => {
  it('is never taken for uncharged on a repeated requestId: a constant one (req-1), then an empty one, then the replay of the charge: 1 charge', async () => {
    const svc = await service((res, n, replay) => (n <= 2 ? problem(res, 500, 'internal', 'req-1') : n === 3 ? problem(res, 500, 'internal', '') : replay()));
    const { run, totals, rows } = await enrich();
    expect(run.code, run.stderr).toBe(0);
    expect(svc.charges()).toBe(1);
    expect(totals).toMatchObject({ credits_charged: 1, credits_unconfirmed: 0, bought: 1 });
    expect(rows[0]).toMatchObject({ enrich_status: 'matched', company_name: 'Acme' });
  });

  it('whose key a failing idempotency layer answers only with 500s is retired after --settle and counted as possibly charged: the summary adds up to what the service charged', async () => {
    const svc = await service((res) => problem(res, 500, 'internal', `req-${Math.random()}`));
    const { run, totals } = await enrich(['--settle', '1s']);
    expect(run.code, run.stderr).toBe(0);
    expect(svc.charges()).toBe(2);
    // Never "credits spent 1" alone when the balance moved by 2.
    expect((totals['credits_charged'] ?? 0) + (totals['credits_unconfirmed'] ?? 0)).toBe(svc.charges());
    expect(run.stderr).toMatch(/maybe charged\s+1\s+more: an answer lost, then only errors under its key/);
  });

  it('whose key is then answered with 402s stops for credits after --settle, and says the company may already have been charged', async () => {
    await service((res) => problem(res, 402, 'insufficient_credits', `req-${Math.random()}`), { broke: true });
    const { run, totals } = await enrich(['--settle', '1s']);
    expect(run.code, run.stderr).toBe(4);
    expect(totals).toMatchObject({ credits_charged: 0, credits_unconfirmed: 1 });
    expect(run.stderr).toContain('needs 1 more credit (1 credit more may already have been charged for one of them: an answer lost, then only errors under its key)');
  });
});

describe('a service that stores a 500 under its key and replays it', () => {
  it('is not taken for an outage: ten lost answers whose keys replay stored 500s settle and are bought under new keys, exit 0, results written, each charged once', async () => {
    const domains = Array.from({ length: 10 }, (_, i) => `stored-500-co${i}.com`);
    const stored = new Set<string>();
    const lostFor = new Set<string>();
    const charges = new Map<string, number>();
    server = await hostileServer((req, res, _n, body) => {
      if (req.method === 'GET') {
        const domain = new URL(req.url ?? '/', 'http://x').searchParams.get('domain') ?? '';
        return json(res, 200, { matched: true, credits_charged: 0, company: { domain, name: domain } });
      }
      const key = String(req.headers['idempotency-key']);
      const { domain } = JSON.parse(body) as { domain: string };
      // The first request under each company's first key ran and failed; the service stored its
      // 500 under the key, and the answer was lost on the way back. Later ones under that key
      // replay the 500, each with a new requestId.
      if (stored.has(key)) return problem(res, 500, 'internal', `req-${Math.random()}`);
      if (!lostFor.has(domain)) {
        lostFor.add(domain);
        stored.add(key);
        res.socket?.destroy();
        return;
      }
      charges.set(domain, (charges.get(domain) ?? 0) + 1);
      json(res, 200, record(domain, 90));
    });
    const input = dir.file('many.csv', csvText([['domain'], ...domains.map((d) => [d])]));
    const out = dir.file('many.out.csv');
    const run = await runCli([input, '-o', out, '--store', dir.file('store.db'), '--settle', '3s'], { env: { ENRICH_BASE_URL: server.url, ENRICH_API_KEY: KEY } });
    expect(run.code, run.stderr).toBe(0);
    expect(readCsvFile(out).map((r) => r['enrich_status'])).toStrictEqual(domains.map(() => 'matched'));
    expect([...charges.values()]).toStrictEqual(domains.map(() => 1));
  });
});
