import { readFileSync } from 'node:fs';
import type { ServerResponse } from 'node:http';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { csvText, readCsvFile, runCli, tempDir } from './helpers/cli.js';
import { hostileServer, json, type Hostile } from './helpers/hostile.js';
import { companyRecord } from './helpers/records.js';

/**
 * Found by an adversarial review and fixed: the settle rule's probe (enrich-step.ts probe) takes a 429
 * for the paid endpoint answering. A 429 comes from the rate limiter in front of the service and
 * proves nothing (pipeline/keys.ts says so), but Health.failed counts every 4xx to a request
 * under no lost key, the probe included, as a fresh answer of the paid endpoint. The service
 * helper is test/money-keys.test.ts's, copied.
 */
const KEY = 'sk_test_review_probe_0123';
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
  company: companyRecord(domain, { employee_count: 10 }),
});
const problem = (res: ServerResponse, status: number, code: string, requestId: string): void =>
  json(res, status, { type: `https://errors.example/${code}`, title: code, status, code, requestId, ...(status === 402 ? { balance: 0, required: 1 } : {}) });

type Answer = 'charge' | 'lose' | 'lose-error' | 'replay' | { status: number; code: string; rid?: string };

/**
 * An idempotent service: each paid request is answered by `script(domain, key, n)`, n counting
 * that domain's requests from 1. 'charge' charges and stores the record under the key; 'lose'
 * charges, stores, and drops the answer; 'lose-error' stores a 500 under the key (Stripe-style)
 * and drops the answer; 'replay' answers what the key stored (a record, free; or its 500).
 * Matches are free and always hit. `hold`: answer the domains it names only once `released`
 * says so, given each domain's requests so far (progress, never the clock).
 */
async function service(script: (domain: string, key: string, n: number) => Answer, hold?: { domain: (d: string) => boolean; released: (seen: ReadonlyMap<string, number>) => boolean }) {
  const charges = new Map<string, number>();
  const stored = new Map<string, string>();
  const seen = new Map<string, number>();
  const keys = new Set<string>();
  let lost = 0;
  let probes = 0;
  const answer = (res: ServerResponse, domain: string, key: string): void => {
    const n = (seen.get(domain) ?? 0) + 1;
    seen.set(domain, n);
    keys.add(key);
    const a = script(domain, key, n);
    if (a === 'lose-error') {
      stored.set(key, 'error');
      lost++;
      res.socket?.destroy();
      return;
    }
    if (a === 'replay' && stored.get(key) === 'error') return problem(res, 500, 'internal', `req-${Math.random()}`);
    if (a === 'replay' && stored.has(key)) return json(res, 200, JSON.parse(stored.get(key) as string));
    if (a === 'charge' || a === 'lose' || a === 'replay') {
      // Idempotent: a key that stored a record is never charged again.
      if (!stored.has(key)) charges.set(domain, (charges.get(domain) ?? 0) + 1);
      stored.set(key, JSON.stringify(record(domain, 90)));
      if (a !== 'lose') return json(res, 200, record(domain, 90));
      lost++;
      res.socket?.destroy();
      return;
    }
    problem(res, a.status, a.code, a.rid ?? `req-${Math.random()}`);
  };
  const waiting: (() => void)[] = [];
  server = await hostileServer((req, res, _n, body) => {
    if (req.method === 'GET') {
      const domain = new URL(req.url ?? '/', 'http://x').searchParams.get('domain') ?? '';
      return json(res, 200, { matched: true, credits_charged: 0, company: { domain, name: domain } });
    }
    const { domain } = JSON.parse(body) as { domain?: string };
    if (domain === undefined) {
      // An enrich with no domain (enrich's probe of the paid endpoint): 422, as the spec says,
      // unless the script has the endpoint failing (an outage answers everything alike).
      probes++;
      const a = script('', String(req.headers['idempotency-key']), 0);
      return typeof a === 'object' ? problem(res, a.status, a.code, `req-${Math.random()}`) : problem(res, 422, 'validation_error', `req-${Math.random()}`);
    }
    const go = (): void => answer(res, domain, String(req.headers['idempotency-key']));
    if (hold?.domain(domain) === true && !hold.released(seen)) waiting.push(go);
    else go();
    if (hold?.released(seen) === true) for (const w of waiting.splice(0)) w();
  });
  return { charges, keys, lost: () => lost, probes: () => probes, total: () => [...charges.values()].reduce((a, b) => a + b, 0) };
}

async function enrich(domains: string[], extra: string[] = []) {
  const input = dir.file('in.csv', csvText([['domain'], ...domains.map((d) => [d])]));
  const out = dir.file('out.csv');
  const summary = dir.file('summary.json');
  const run = await runCli([input, '-o', out, '--summary-json', summary, '--store', dir.file('store.db'), '--concurrency', '8', ...extra], { env: { ENRICH_BASE_URL: server?.url, ENRICH_API_KEY: KEY } });
  const totals = JSON.parse(readFileSync(summary, 'utf8')) as Record<string, number>;
  return { run, totals, rows: readCsvFile(out) };
}

const internal = { status: 500, code: 'internal' };
const limited = { status: 429, code: 'rate_limited' };

describe('a paid endpoint down behind a rate limiter, after answers were lost', () => {
  it('the probe\'s 429 is no proof the paid endpoint answers: no lost key is retired during the outage, and each company is charged once', async () => {
    let phase: 'lose' | 'down' | 'up' = 'lose';
    const domains = Array.from({ length: 4 }, (_, i) => `limited-co${i}.com`);
    // Down: every paid request that gets past the limiter fails (an outage in front of the
    // idempotency layer answers 500 even to a charged key); the probe is the one the limiter turns away.
    const svc = await service((d, _k) => (phase === 'lose' ? 'lose' : phase === 'down' ? (d === '' ? limited : internal) : 'replay'));
    const first = await enrich(domains, ['--settle', '1s']);
    expect(first.totals['at_risk']).toBe(4);
    const keysBefore = new Set(svc.keys);
    phase = 'down';
    const down = await enrich(domains, ['--settle', '1s']);
    // Before the fix: exit 3 (not 6: each 429 resets the breaker), 5 probes, 20 new keys sent under the outage.
    expect(down.run.code).not.toBe(0);
    phase = 'up';
    const up = await enrich(domains, ['--settle', '1s']);
    expect(up.run.code, up.run.stderr).toBe(0);
    // Before the fix: each of the 4 companies charged twice (its lost v1 key, and a new key after the outage).
    expect([...svc.charges.values()]).toStrictEqual(domains.map(() => 1));
    expect([...svc.keys].filter((k) => !keysBefore.has(k))).toStrictEqual([]);
  }, 60_000);
});
