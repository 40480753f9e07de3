import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startSandbox, DEFAULT_TYPE_BASE, type Sandbox } from '../src/sandbox/index.js';
import { call, ENRICH, MATCH, type Reply } from './helpers/http.js';

const KEY = 'sk_test_full';
const NOSCOPE = 'sk_test_noscope';
const REVOKED = 'sk_test_revoked';

let sb: Sandbox;
beforeEach(async () => {
  sb = await startSandbox({
    keys: [{ key: KEY, balance: 100 }, { key: NOSCOPE, scopes: ['billing:read'] }, { key: REVOKED, revoked: true }],
  });
});
afterEach(() => sb.close());

function expectProblem(r: Reply, status: number, code: string): void {
  expect(r.status).toBe(status);
  expect(r.headers['content-type']).toBe('application/problem+json');
  expect(r.json).toMatchObject({ type: `${DEFAULT_TYPE_BASE}/${code}`, status, code });
  expect(typeof r.json['title']).toBe('string');
  expect(r.json['requestId']).toMatch(/^req_/);
}

const companyWithAlias = (): { domain: string; alias: string; name: string } => {
  for (const c of sb.directory) if (c.aliases.length > 0) return { domain: c.domain, alias: c.aliases[0] as string, name: c.name };
  throw new Error('fixture has no aliases');
};

describe('match', () => {
  it('answers the match view for a held company, free', async () => {
    const { domain, name } = companyWithAlias();
    const r = await call(sb.url, 'GET', `${MATCH}?domain=${domain}`, { key: KEY });
    expect(r.status).toBe(200);
    expect(r.headers['content-type']).toBe('application/json');
    expect(r.json).toStrictEqual({ matched: true, credits_charged: 0, company: { domain, name } });
    expect(sb.ledger(KEY)).toHaveLength(0);
  });

  it('normalises URLs, www, case, ports and paths; answers aliases with the canonical domain', async () => {
    const { domain, alias } = companyWithAlias();
    for (const spelling of [`https://www.${domain.toUpperCase()}:8443/about?x=1`, `www.${domain}`, `shop.${domain}`, alias, `http://${alias}/`]) {
      const r = await call(sb.url, 'GET', `${MATCH}?domain=${encodeURIComponent(spelling)}`, { key: KEY });
      expect(r.json, spelling).toMatchObject({ matched: true, company: { domain } });
    }
  });

  it('answers a miss as 200 matched:false, never 404', async () => {
    const r = await call(sb.url, 'GET', `${MATCH}?domain=surely-not-held-anywhere.com`, { key: KEY });
    expect(r.status).toBe(200);
    expect(r.json).toStrictEqual({ matched: false, credits_charged: 0, company: null });
  });

  it.each([['', 'missing'], ['?domain=', 'empty'], ['?domain=co.uk', 'public suffix'], ['?domain=10.0.0.1', 'ip'], ['?domain=not%20a%20domain', 'junk']])(
    '422 validation_error for %s (%s)',
    async (query) => {
      expectProblem(await call(sb.url, 'GET', `${MATCH}${query}`, { key: KEY }), 422, 'validation_error');
    },
  );
});

describe('enrich', () => {
  it('charges 1 on a match and reports the balance after the call, with the exact record shape', async () => {
    const { domain } = companyWithAlias();
    const r = await call(sb.url, 'POST', ENRICH, { key: KEY, body: { domain } });
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ matched: true, credits_charged: 1, credits_remaining: 99 });
    const company = r.json['company'] as Record<string, unknown>;
    expect(Object.keys(company)).toStrictEqual([
      'domain', 'name', 'website_url', 'description', 'industry', 'employee_count', 'revenue_range',
      'ownership_type', 'year_founded', 'specialties', 'hq_country', 'hq_city', 'last_updated',
    ]);
    expect(company['domain']).toBe(domain);
    expect(Array.isArray(company['specialties'])).toBe(true);
    expect(new Date(company['last_updated'] as string).toISOString()).toBe(company['last_updated']);
    expect(sb.balance(KEY)).toBe(99);
    expect([...sb.chargesByDomain(KEY)]).toStrictEqual([[domain, 1]]);
  });

  it('keeps nullable fields as null and specialties as an array across the data set', async () => {
    let nulls = 0;
    for (const c of sb.directory) {
      for (const field of ['website_url', 'description', 'industry', 'employee_count', 'revenue_range', 'ownership_type', 'year_founded', 'hq_country', 'hq_city'] as const) {
        if (c[field] === null) nulls++;
        else expect(c[field]).toBeDefined();
      }
      expect(Array.isArray(c.specialties)).toBe(true);
    }
    expect(nulls).toBeGreaterThan(100);
    expect(sb.directory.size).toBeGreaterThanOrEqual(5000);
  });

  it('answers a miss with credits_charged 0 and charges nothing', async () => {
    const r = await call(sb.url, 'POST', ENRICH, { key: KEY, body: { domain: 'nobody-holds-this.io' } });
    expect(r.json).toStrictEqual({ matched: false, credits_charged: 0, credits_remaining: 100, company: null });
    expect(sb.ledger(KEY)).toHaveLength(0);
  });

  it.each([
    ['no body', undefined],
    ['broken JSON', '{"domain":'],
    ['no domain', '{}'],
    ['domain not a string', '{"domain":42}'],
    ['unparseable domain', '{"domain":"localhost"}'],
  ])('422 validation_error for %s', async (_label, rawBody) => {
    const r = await call(sb.url, 'POST', ENRICH, { key: KEY, ...(rawBody === undefined ? {} : { rawBody }), headers: { 'content-type': 'application/json' } });
    expectProblem(r, 422, 'validation_error');
    expect(sb.ledger(KEY)).toHaveLength(0);
  });

  it('402 insufficient_credits carries balance and required and charges nothing', async () => {
    const domains = [...sb.directory].slice(0, 3).map((c) => c.domain);
    const poor = await startSandbox({ keys: [{ key: 'poor', balance: 1 }] });
    try {
      expect((await call(poor.url, 'POST', ENRICH, { key: 'poor', body: { domain: domains[0] } })).status).toBe(200);
      const r = await call(poor.url, 'POST', ENRICH, { key: 'poor', body: { domain: domains[1] } });
      expectProblem(r, 402, 'insufficient_credits');
      expect(r.json).toMatchObject({ balance: 0, required: 1 });
      expect(poor.balance('poor')).toBe(0);
      expect(poor.ledger('poor')).toHaveLength(1);
      // A miss costs nothing, so it still answers with an empty balance.
      expect((await call(poor.url, 'POST', ENRICH, { key: 'poor', body: { domain: 'nobody-holds-this.io' } })).status).toBe(200);
    } finally {
      await poor.close();
    }
  });
});

describe('auth', () => {
  it('answers missing, malformed, unknown and revoked keys with one identical 401', async () => {
    const answers = await Promise.all([
      call(sb.url, 'GET', `${MATCH}?domain=a.com`, { key: null }),
      call(sb.url, 'GET', `${MATCH}?domain=a.com`, { headers: { authorization: 'Token abc' } }),
      call(sb.url, 'GET', `${MATCH}?domain=a.com`, { key: 'sk_nobody' }),
      call(sb.url, 'GET', `${MATCH}?domain=a.com`, { key: REVOKED }),
    ]);
    const bodies = answers.map((r) => {
      expectProblem(r, 401, 'invalid_token');
      const { requestId: _ignored, ...rest } = r.json;
      return rest;
    });
    for (const b of bodies) expect(b).toStrictEqual(bodies[0]);
  });

  it('403 insufficient_scope for a valid key without search:read, on both endpoints', async () => {
    expectProblem(await call(sb.url, 'GET', `${MATCH}?domain=a.com`, { key: NOSCOPE }), 403, 'insufficient_scope');
    expectProblem(await call(sb.url, 'POST', ENRICH, { key: NOSCOPE, body: { domain: 'a.com' } }), 403, 'insufficient_scope');
  });
});

describe('routing', () => {
  it('answers a mistyped path with a 404 problem document', async () => {
    expectProblem(await call(sb.url, 'GET', '/api/v1/public/company/matches?domain=a.com', { key: KEY }), 404, 'not_found');
    expectProblem(await call(sb.url, 'GET', '/', { key: null }), 404, 'not_found');
  });

  it('answers a wrong method with 405 and Allow', async () => {
    const r = await call(sb.url, 'POST', MATCH, { key: KEY, body: {} });
    expectProblem(r, 405, 'method_not_allowed');
    expect(r.headers['allow']).toBe('GET');
  });

  it.each(['/api/v1/public/search', '/api/v1/public/person/enrich'])('answers the planned %s with 501 not_callable', async (path) => {
    const r = await call(sb.url, 'POST', path, { key: KEY, body: { entity: 'company', filters: {} } });
    expectProblem(r, 501, 'not_callable');
    expect(r.json['detail']).toMatch(/planned/);
  });

  it('serves an OpenAPI description of the callable endpoints only, each marked beta', async () => {
    const r = await call(sb.url, 'GET', '/api/v1/public/openapi.json');
    expect(r.status).toBe(200);
    const paths = r.json['paths'] as Record<string, Record<string, Record<string, unknown>>>;
    expect(Object.keys(paths).sort()).toStrictEqual(['/company/enrich', '/company/match']);
    expect(paths['/company/match']?.['get']?.['x-availability']).toBe('beta');
    expect(paths['/company/enrich']?.['post']?.['x-availability']).toBe('beta');
    expect((r.json['servers'] as { url: string }[])[0]?.url).toBe(`${sb.url}/api/v1/public`);
  });
});

describe('idempotency', () => {
  it('replays the stored answer for a repeated key and charges once', async () => {
    const { domain } = companyWithAlias();
    const headers = { 'idempotency-key': 'ik-1' };
    const first = await call(sb.url, 'POST', ENRICH, { key: KEY, body: { domain }, headers });
    const again = await call(sb.url, 'POST', ENRICH, { key: KEY, body: { domain }, headers });
    expect(again.status).toBe(first.status);
    expect(again.text).toBe(first.text);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(sb.ledger(KEY)).toHaveLength(1);
    expect(sb.balance(KEY)).toBe(99);
    // The same body with keys in another order and spacing is the same request.
    const reordered = await call(sb.url, 'POST', ENRICH, { key: KEY, rawBody: `{ "domain" : "${domain}" }`, headers: { ...headers, 'content-type': 'application/json' } });
    expect(reordered.text).toBe(first.text);
  });

  it('rejects the same key with a different body with a clear 422', async () => {
    const [a, b] = [...sb.directory].slice(0, 2).map((c) => c.domain);
    await call(sb.url, 'POST', ENRICH, { key: KEY, body: { domain: a }, headers: { 'idempotency-key': 'ik-2' } });
    const r = await call(sb.url, 'POST', ENRICH, { key: KEY, body: { domain: b }, headers: { 'idempotency-key': 'ik-2' } });
    expectProblem(r, 422, 'validation_error');
    expect(r.json['detail']).toMatch(/different request body/);
    expect(sb.ledger(KEY)).toHaveLength(1);
  });

  // Spec 7: nothing was charged, so the client retries.
  it('stores nothing for a 500 by default: the same key then executes afresh', async () => {
    const { domain } = companyWithAlias();
    sb.setFailRate(1);
    const failed = await call(sb.url, 'POST', ENRICH, { key: KEY, body: { domain }, headers: { 'idempotency-key': 'ik-3' } });
    expectProblem(failed, 500, 'internal');
    sb.setFailRate(0);
    const retried = await call(sb.url, 'POST', ENRICH, { key: KEY, body: { domain }, headers: { 'idempotency-key': 'ik-3' } });
    expect(retried.status).toBe(200);
    expect(retried.headers['idempotent-replayed']).toBeUndefined();
    expect(sb.ledger(KEY)).toHaveLength(1);
  });

  // Spec 7: top up, then replay.
  it('stores nothing for a 402 by default: after a top-up the same key buys', async () => {
    const { domain } = companyWithAlias();
    const poor = await startSandbox({ keys: [{ key: 'poor', balance: 0 }] });
    try {
      const headers = { 'idempotency-key': 'ik-402' };
      expectProblem(await call(poor.url, 'POST', ENRICH, { key: 'poor', body: { domain }, headers }), 402, 'insufficient_credits');
      poor.topUp('poor', 5);
      const bought = await call(poor.url, 'POST', ENRICH, { key: 'poor', body: { domain }, headers });
      expect(bought.status).toBe(200);
      expect(bought.json).toMatchObject({ matched: true, credits_charged: 1, credits_remaining: 4 });
      const again = await call(poor.url, 'POST', ENRICH, { key: 'poor', body: { domain }, headers });
      expect(again.text).toBe(bought.text);
      expect(poor.ledger('poor')).toHaveLength(1);
    } finally {
      await poor.close();
    }
  });

  describe("in stripe mode (every executed outcome stored under its key)", () => {
    const stored = async (replayRequestId?: 'original' | 'fresh' | 'none'): Promise<{ failed: Reply; replays: Reply[]; fresh: Reply; ledger: number }> => {
      const { domain } = companyWithAlias();
      const stripe = await startSandbox({ keys: [{ key: KEY }], idempotency: 'stripe', failRate: 1, ...(replayRequestId === undefined ? {} : { replayRequestId }) });
      try {
        const headers = { 'idempotency-key': 'ik-3' };
        const failed = await call(stripe.url, 'POST', ENRICH, { key: KEY, body: { domain }, headers });
        stripe.setFailRate(0);
        const replays = [await call(stripe.url, 'POST', ENRICH, { key: KEY, body: { domain }, headers }), await call(stripe.url, 'POST', ENRICH, { key: KEY, body: { domain }, headers })];
        const fresh = await call(stripe.url, 'POST', ENRICH, { key: KEY, body: { domain }, headers: { 'idempotency-key': 'ik-3.v2' } });
        return { failed, replays, fresh, ledger: stripe.ledger(KEY).length };
      } finally {
        await stripe.close();
      }
    };

    it('replays a stored 500 byte for byte with its request id; a new key gets a new answer', async () => {
      const { failed, replays, fresh, ledger } = await stored();
      expectProblem(failed, 500, 'internal');
      for (const r of replays) {
        expect(r.text).toBe(failed.text);
        expect(r.headers['idempotent-replayed']).toBe('true');
        expect(r.headers['x-request-id']).toBe(failed.json['requestId']);
      }
      expect(fresh.status).toBe(200);
      expect(ledger).toBe(1);
    });

    it('can give each replay a request id of its own', async () => {
      const { failed, replays } = await stored('fresh');
      const ids = [failed, ...replays].map((r) => r.json['requestId']);
      expect(new Set(ids).size).toBe(3);
      for (const r of replays) {
        expect(r.json['code']).toBe('internal');
        expect(r.headers['x-request-id']).toBe(r.json['requestId']);
      }
    });

    it('can replay with no request id at all', async () => {
      const { replays } = await stored('none');
      for (const r of replays) {
        expect(r.status).toBe(500);
        expect(r.json['code']).toBe('internal');
        expect('requestId' in r.json).toBe(false);
        expect(r.headers['x-request-id']).toBeUndefined();
      }
    });

    it('replays a stored 402 even after a top-up', async () => {
      const { domain } = companyWithAlias();
      const poor = await startSandbox({ keys: [{ key: 'poor', balance: 0 }], idempotency: 'stripe' });
      try {
        const headers = { 'idempotency-key': 'ik-402' };
        const refused = await call(poor.url, 'POST', ENRICH, { key: 'poor', body: { domain }, headers });
        expectProblem(refused, 402, 'insufficient_credits');
        poor.topUp('poor', 5);
        const replayed = await call(poor.url, 'POST', ENRICH, { key: 'poor', body: { domain }, headers });
        expect(replayed.text).toBe(refused.text);
        expect(poor.ledger('poor')).toHaveLength(0);
      } finally {
        await poor.close();
      }
    });
  });

  it('keeps the ledger exact under concurrent requests, retries and replays', async () => {
    const domains = [...sb.directory].slice(0, 40).map((c) => c.domain);
    const rich = await startSandbox({ keys: [{ key: 'rich', balance: 1000 }], latencyMs: 5 });
    try {
      // Every company is requested 5 times at once with its own key, and once more without a key.
      const calls = domains.flatMap((domain, i) => [
        ...Array.from({ length: 5 }, () => call(rich.url, 'POST', ENRICH, { key: 'rich', body: { domain }, headers: { 'idempotency-key': `k-${i}` } })),
        call(rich.url, 'POST', ENRICH, { key: 'rich', body: { domain } }),
      ]);
      const replies = await Promise.all(calls);
      expect(replies.every((r) => r.status === 200)).toBe(true);
      const charges = rich.chargesByDomain('rich');
      expect(charges.size).toBe(domains.length);
      for (const d of domains) expect(charges.get(d)).toBe(2);
      expect(rich.balance('rich')).toBe(1000 - 2 * domains.length);
      expect(rich.stats.replays).toBe(4 * domains.length);
    } finally {
      await rich.close();
    }
  });
});

describe('rate limit', () => {
  it('429s past the bucket with Retry-After, counting free calls, then refills', async () => {
    let clock = 0;
    const limited = await startSandbox({ keys: [{ key: 'k' }], rateLimit: 2, burst: 3, now: () => clock });
    try {
      for (let i = 0; i < 3; i++) expect((await call(limited.url, 'GET', `${MATCH}?domain=a.com`, { key: 'k' })).status).toBe(200);
      const r = await call(limited.url, 'POST', ENRICH, { key: 'k', body: { domain: [...limited.directory][0]?.domain } });
      expectProblem(r, 429, 'rate_limited');
      expect(r.json['retryAfterSeconds']).toBe(1);
      expect(r.headers['retry-after']).toBe('1');
      expect(limited.ledger('k')).toHaveLength(0);
      clock += 500; // one token back at 2/s
      expect((await call(limited.url, 'GET', `${MATCH}?domain=a.com`, { key: 'k' })).status).toBe(200);
      expect((await call(limited.url, 'GET', `${MATCH}?domain=a.com`, { key: 'k' })).status).toBe(429);
      clock += 10_000; // refills to the burst size, not beyond
      const burst = await Promise.all(Array.from({ length: 5 }, () => call(limited.url, 'GET', `${MATCH}?domain=a.com`, { key: 'k' })));
      expect(burst.filter((x) => x.status === 200)).toHaveLength(3);
    } finally {
      await limited.close();
    }
  });

  it('keeps a separate bucket per key', async () => {
    const limited = await startSandbox({ keys: [{ key: 'a' }, { key: 'b' }], rateLimit: 1, now: () => 0 });
    try {
      expect((await call(limited.url, 'GET', `${MATCH}?domain=a.com`, { key: 'a' })).status).toBe(200);
      expect((await call(limited.url, 'GET', `${MATCH}?domain=a.com`, { key: 'a' })).status).toBe(429);
      expect((await call(limited.url, 'GET', `${MATCH}?domain=a.com`, { key: 'b' })).status).toBe(200);
    } finally {
      await limited.close();
    }
  });

  it("counts per fixed window when asked, with Retry-After to the window's end", async () => {
    let clock = 1_200;
    const limited = await startSandbox({ keys: [{ key: 'k' }], rateLimit: 2, fixedWindowMs: 2_000, now: () => clock });
    try {
      const get = async (): Promise<Reply> => call(limited.url, 'GET', `${MATCH}?domain=a.com`, { key: 'k' });
      for (let i = 0; i < 4; i++) expect((await get()).status).toBe(200);
      const r = await get();
      expectProblem(r, 429, 'rate_limited');
      expect(r.headers['retry-after']).toBe('1'); // 800 ms to the boundary at 2,000, rounded up
      clock = 2_000;
      for (let i = 0; i < 4; i++) expect((await get()).status).toBe(200);
      expect((await get()).status).toBe(429);
    } finally {
      await limited.close();
    }
  });

  it("lets a one-token bucket's clock be coarse: it sees whole milliseconds", async () => {
    let clock = 0.9;
    const limited = await startSandbox({ keys: [{ key: 'k' }], rateLimit: 100, burst: 1, clockTickMs: 1, now: () => clock });
    try {
      const get = async (): Promise<number> => (await call(limited.url, 'GET', `${MATCH}?domain=a.com`, { key: 'k' })).status;
      expect(await get()).toBe(200); // seen at 0
      clock = 10; // 9.1 ms later, which an exact clock refuses, but seen 10 ms after 0
      expect(await get()).toBe(200);
      clock = 19.99; // 9.99 ms later, seen at 19: 9 ms
      expect(await get()).toBe(429);
    } finally {
      await limited.close();
    }
  });
});

describe('faults', () => {
  it('injects 500 internal by seed, charging nothing, reproducibly', async () => {
    const run = async (): Promise<number[]> => {
      const faulty = await startSandbox({ keys: [{ key: 'k' }], failRate: 0.3, seed: 7 });
      try {
        const statuses: number[] = [];
        for (const c of [...faulty.directory].slice(0, 30)) {
          const r = await call(faulty.url, 'POST', ENRICH, { key: 'k', body: { domain: c.domain } });
          if (r.status === 500) expectProblem(r, 500, 'internal');
          statuses.push(r.status);
        }
        expect(faulty.ledger('k')).toHaveLength(statuses.filter((s) => s === 200).length);
        return statuses;
      } finally {
        await faulty.close();
      }
    };
    const first = await run();
    expect(first.filter((s) => s === 500).length).toBeGreaterThan(3);
    expect(await run()).toStrictEqual(first);
  });
});

describe('admin', () => {
  it('reads the ledger and tops up over HTTP for the calling key', async () => {
    const { domain } = companyWithAlias();
    await call(sb.url, 'POST', ENRICH, { key: KEY, body: { domain } });
    const ledger = await call(sb.url, 'GET', '/_sandbox/ledger', { key: KEY });
    expect(ledger.json).toMatchObject({ balance: 99, charged: 1, entries: [{ domain, credits: 1 }] });
    const topped = await call(sb.url, 'POST', '/_sandbox/topup', { key: KEY, body: { credits: 50 } });
    expect(topped.json).toStrictEqual({ balance: 149 });
    expectProblem(await call(sb.url, 'POST', '/_sandbox/topup', { key: KEY, body: { credits: -5 } }), 422, 'validation_error');
    expectProblem(await call(sb.url, 'GET', '/_sandbox/ledger', { key: 'nobody' }), 401, 'invalid_token');
  });
});
