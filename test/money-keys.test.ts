import { readFileSync } from 'node:fs';
import type { ServerResponse } from 'node:http';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { csvText, readCsvFile, runCli, tempDir } from './helpers/cli.js';
import { hostileServer, json, type Hostile } from './helpers/hostile.js';
import { companyRecord } from './helpers/records.js';

/**
 * What a lost paid answer proves, against scripted services the sandbox cannot play: one whose
 * problem documents carry a constant requestId, one whose idempotency layer fails, one that
 * stores a 500 under its key, one whose paid endpoint goes down. Over real HTTP; the service's
 * own count of charges is the proof.
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

describe('a lost paid answer', () => {
  it('is never taken for uncharged on a repeated or empty requestId: one charge in all', async () => {
    const svc = await service((_d, _k, n) => (n === 1 ? 'lose' : n <= 3 ? { ...internal, rid: 'req-1' } : n === 4 ? { ...internal, rid: '' } : 'replay'));
    const { run, totals, rows } = await enrich(['acme-co.com']);
    expect(run.code, run.stderr).toBe(0);
    expect(svc.total()).toBe(1);
    expect(totals).toMatchObject({ credits_charged: 1, credits_unconfirmed: 0, bought: 1 });
    expect(rows[0]).toMatchObject({ enrich_status: 'matched', company_name: 'acme-co.com' });
  });

  // Once the paid endpoint has answered afresh; the summary adds up to what the service charged.
  it('whose key gets only 500s is retired after --settle and counted as possibly charged', async () => {
    // other-co.com is bought normally, but only after acme's answer was lost: fresh proof the paid endpoint works.
    const svc = await service((d, key, n) => (d === 'other-co.com' ? 'charge' : n === 1 ? 'lose' : key.endsWith('v1') ? internal : 'charge'), {
      domain: (d) => d === 'other-co.com',
      // Once acme's answer was lost and its retry came: the client saw the loss before this answer.
      released: (seen) => (seen.get('acme-co.com') ?? 0) >= 2,
    });
    const { run, totals } = await enrich(['acme-co.com', 'other-co.com'], ['--settle', '2s', '--timeout', '2s']);
    expect(run.code, run.stderr).toBe(0);
    expect(svc.charges.get('acme-co.com')).toBe(2);
    // Never "credits spent 2" alone when the balance moved by 3.
    expect((totals['credits_charged'] ?? 0) + (totals['credits_unconfirmed'] ?? 0)).toBe(svc.total());
    expect(run.stderr).toMatch(/maybe charged\s+1\s+more: an answer lost, then only errors under its key/);
    // The month: what was charged, and apart, what may have been (not one figure that mixes them).
    expect(totals['month']).toMatchObject({ credits: 2, unconfirmed_credits: 1 });
    expect(run.stderr).toMatch(/this month +2 +credits charged to this service's runs since \S+ UTC, and up to 1 unconfirmed; \$0 on Free/);
    // A dry run's month says the same, in the same words.
    const dry = await enrich(['acme-co.com', 'other-co.com', 'new-co.com'], ['--dry-run', '--overwrite']);
    expect(dry.run.stderr).toMatch(/this month +3 +credits since \S+ UTC \(2 spent earlier by this service's runs \+ 1 this run, and up to 1 unconfirmed\)/);
  });

  // Issue 36: the settle a key was lost under goes with it to the store, for the runs after.
  it("lost under a long --timeout, is not retired by a later run's shorter --settle: charged once", async () => {
    const svc = await service((d, key, n) => (d === 'other-co.com' ? 'charge' : n === 1 ? 'lose' : key.endsWith('v1') ? internal : 'charge'), {
      domain: (d) => d === 'other-co.com',
      released: (seen) => (seen.get('acme-co.com') ?? 0) >= 2,
    });
    // A lost call here may run 5 minutes at the service: nothing this run or the next sees retires its key.
    const first = await enrich(['acme-co.com', 'other-co.com'], ['--settle', '5m', '--timeout', '5m']);
    expect(first.run.code, first.run.stderr).toBe(3);
    // The next run (2 s of its own, which it waits out on its own clock) keeps the key and buys nothing new.
    const second = await enrich(['acme-co.com', 'other-co.com'], ['--settle', '2s', '--timeout', '2s']);
    expect(second.run.code, second.run.stderr).toBe(3);
    expect(svc.charges.get('acme-co.com')).toBe(1);
    expect([...svc.keys].filter((k) => !k.endsWith('v1'))).toStrictEqual([]);
    expect(second.totals).toMatchObject({ credits_charged: 0, credits_unconfirmed: 0, at_risk: 1 });
  });

  it('whose key then gets 402s stops for credits after --settle, saying it may be charged', async () => {
    await service((d, _key, n) => (d === 'other-co.com' ? 'charge' : n === 1 ? 'lose' : { status: 402, code: 'insufficient_credits' }), {
      domain: (d) => d === 'other-co.com',
      // Once acme's answer was lost and its retry came: the client saw the loss before this answer.
      released: (seen) => (seen.get('acme-co.com') ?? 0) >= 2,
    });
    const { run, totals } = await enrich(['acme-co.com', 'other-co.com'], ['--settle', '2s', '--timeout', '2s']);
    expect(run.code, run.stderr).toBe(4);
    expect(totals).toMatchObject({ credits_charged: 1, credits_unconfirmed: 1 });
    expect(run.stderr).toContain('needs 1 more credit (1 credit more may already have been charged for one of them: an answer lost, then only errors under its key)');
  });
});

describe('a paid endpoint that goes down after answers were lost', () => {
  it('never has a lost key retired: no new key during the outage, each replayed after it', async () => {
    let phase: 'lose' | 'down' | 'up' = 'lose';
    const domains = Array.from({ length: 10 }, (_, i) => `outage-co${i}.com`);
    const svc = await service((_d, _k) => (phase === 'lose' ? 'lose' : phase === 'down' ? internal : 'replay'));
    const first = await enrich(domains, ['--settle', '2s', '--timeout', '2s']);
    expect(first.totals['at_risk']).toBe(10);
    // Beside what was spent, on the screen: what may yet be (issue 36).
    expect(first.run.stderr).toMatch(/\n {2}at risk +10 +companies wait on a paid call whose answer never came: at most 10 credits more\n/);
    const keysBefore = new Set(svc.keys);
    phase = 'down';
    const down = await enrich(domains, ['--settle', '2s', '--timeout', '2s']);
    expect(down.run.code).not.toBe(0);
    expect([...svc.keys].filter((k) => !keysBefore.has(k))).toStrictEqual([]);
    expect(down.totals).toMatchObject({ credits_unconfirmed: 0, at_risk: 10 });
    phase = 'up';
    const up = await enrich(domains, ['--settle', '2s', '--timeout', '2s']);
    expect(up.run.code, up.run.stderr).toBe(0);
    expect([...svc.charges.values()]).toStrictEqual(domains.map(() => 1));
    // The outage run asked the paid endpoint with a request it cannot bill, and got the outage's 500.
    expect(svc.probes()).toBeGreaterThan(0);
  });
});

describe('a service that stores a 500 under its key and replays it', () => {
  // The lost keys settle and are bought under new keys.
  it('is not taken for an outage once the paid endpoint answers afresh: one charge each', async () => {
    const stuck = Array.from({ length: 10 }, (_, i) => `stored-500-co${i}.com`);
    const fresh = Array.from({ length: 10 }, (_, i) => `fresh-co${i}.com`);
    // The first request under each stuck company's first key ran and failed; the service stored its
    // 500 under the key, and the answer was lost. Later ones under that key replay the 500.
    const svc = await service((d, key, n) => (fresh.includes(d) ? 'charge' : n === 1 ? 'lose-error' : key.endsWith('v1') ? 'replay' : 'charge'));
    const next = await enrich([...stuck, ...fresh], ['--settle', '2s', '--timeout', '2s']);
    expect(next.run.code, next.run.stderr).toBe(0);
    expect(next.rows.map((r) => r['enrich_status'])).toStrictEqual([...stuck, ...fresh].map(() => 'matched'));
    expect([...stuck, ...fresh].map((d) => svc.charges.get(d))).toStrictEqual([...stuck, ...fresh].map(() => 1));
  });

  // The probe is one enrich it cannot bill (no domain: a 422); the same command then finishes.
  it('is never stuck when only those keys are left: an unbillable probe shows the endpoint up', async () => {
    const stuck = Array.from({ length: 10 }, (_, i) => `stored-500-co${i}.com`);
    const svc = await service((d, key, n) => (n === 1 ? 'lose-error' : key.endsWith('v1') ? 'replay' : 'charge'));
    const run = await enrich(stuck, ['--settle', '2s', '--timeout', '2s']);
    expect(run.run.code, run.run.stderr).toBe(0);
    expect(run.rows.map((r) => r['enrich_status'])).toStrictEqual(stuck.map(() => 'matched'));
    expect(stuck.map((d) => svc.charges.get(d))).toStrictEqual(stuck.map(() => 1));
    // One probe served every key (they were all lost before it was sent).
    expect(svc.probes()).toBe(1);
  });
});

describe('a paid endpoint down behind a rate limiter, after answers were lost', () => {
  it("retires no lost key on a probe's 429 during the outage; each company is charged once", async () => {
    let phase: 'lose' | 'down' | 'up' = 'lose';
    const domains = Array.from({ length: 4 }, (_, i) => `limited-co${i}.com`);
    // Down: every paid request that gets past the limiter fails (an outage in front of the
    // idempotency layer answers 500 even to a charged key); the probe is the one the limiter turns away.
    const svc = await service((d, _k) => (phase === 'lose' ? 'lose' : phase === 'down' ? (d === '' ? limited : internal) : 'replay'));
    const first = await enrich(domains, ['--settle', '2s', '--timeout', '2s']);
    expect(first.totals['at_risk']).toBe(4);
    const keysBefore = new Set(svc.keys);
    phase = 'down';
    const down = await enrich(domains, ['--settle', '2s', '--timeout', '2s']);
    // Before the fix: exit 3 (not 6: each 429 resets the breaker), 5 probes, 20 new keys sent under the outage.
    expect(down.run.code).not.toBe(0);
    phase = 'up';
    const up = await enrich(domains, ['--settle', '2s', '--timeout', '2s']);
    expect(up.run.code, up.run.stderr).toBe(0);
    // Before the fix: each of the 4 companies charged twice (its lost v1 key, and a new key after the outage).
    expect([...svc.charges.values()]).toStrictEqual(domains.map(() => 1));
    expect([...svc.keys].filter((k) => !keysBefore.has(k))).toStrictEqual([]);
  });
});
