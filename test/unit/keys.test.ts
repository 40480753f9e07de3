import { describe, expect, it } from 'vitest';
import { apiErrorFromResponse, connectionError } from '../../src/api/errors.js';
import type { ServiceClient } from '../../src/api/client.js';
import type { EnrichResponse } from '../../src/api/types.js';
import { memoryStore } from '../helpers/memory-store.js';
import type { Purchase, StoreEvent } from '../../src/store/types.js';
import { systemClock } from '../../src/pipeline/clock.js';
import { execute } from '../../src/pipeline/execute.js';
import { idempotencyKey } from '../../src/pipeline/idempotency-key.js';
import { keyVerdict } from '../../src/pipeline/run-purchase.js';
import { decideRetry, DEFAULT_RETRY_POLICY } from '../../src/api/retry.js';
import { Progress } from '../../src/pipeline/progress.js';
import { Flow } from '../../src/pipeline/flow.js';
import { RunState, type Company } from '../../src/pipeline/state.js';
import { openPurchase } from '../helpers/records.js';

const problem = (status: number, code: string, rid: string) =>
  apiErrorFromResponse({ status, contentType: 'application/problem+json', retryAfter: '0', requestId: undefined, body: JSON.stringify({ code, status, requestId: rid, retryAfterSeconds: 0 }) });
const lost = () => connectionError(new Error('ECONNRESET'));

describe('keyVerdict', () => {
  const fresh = { purchase: { state: 'claimed', key: 'acme.com#1', error: null } } satisfies Pick<Company, 'purchase'>;
  const uncertain = { purchase: { state: 'uncertain', key: 'acme.com#1', lostAt: 1_000_000, settleMs: null, error: null } } satisfies Pick<Company, 'purchase'>;
  it('retires a key whose every attempt was answered with an error', () => {
    expect(keyVerdict(fresh, problem(500, 'internal', 'req_9'))).toBe('retired');
    expect(keyVerdict(fresh, problem(402, 'insufficient_credits', 'req_9'))).toBe('retired');
  });
  it('keeps a key whose answer was lost', () => {
    expect(keyVerdict(fresh, lost())).toBe('kept');
  });
  // A repeated requestId proves nothing: it may be constant.
  it('keeps an uncertain key on any error before the settle time, whatever its requestId', () => {
    expect(keyVerdict(uncertain, problem(500, 'internal', 'req_2'))).toBe('kept');
    expect(keyVerdict(uncertain, problem(500, 'internal', 'req_1'))).toBe('kept');
    expect(keyVerdict(uncertain, problem(500, 'internal', ''))).toBe('kept');
    expect(keyVerdict(uncertain, problem(402, 'insufficient_credits', 'req_3'))).toBe('kept');
  });
  // Settled, not confirmed: the lost attempt may have been charged.
  it('settles an uncertain key once the lost attempt must have finished at the service', () => {
    const settle = (now: number) => ({ now, afterMs: 60_000, answeredSince: () => true });
    expect(keyVerdict(uncertain, problem(500, 'internal', 'req_2'), settle(1_000_000 + 59_999))).toBe('kept');
    expect(keyVerdict(uncertain, problem(500, 'internal', 'req_2'), settle(1_000_000 + 60_000))).toBe('settled');
    expect(keyVerdict(uncertain, problem(402, 'insufficient_credits', 'req_4'), settle(1_000_000 + 60_000))).toBe('settled');
    // A gateway's 503 or a lost answer is not the service's word: the key stays, however late.
    expect(keyVerdict(uncertain, lost(), settle(9e12))).toBe('kept');
    expect(keyVerdict({ purchase: { ...uncertain.purchase, lostAt: null } }, problem(500, 'internal', 'req_2'), settle(9e12))).toBe('kept');
  });
  // Lost by a run whose --timeout (so --settle) was 10 minutes: this run's minute does not cut it short.
  it('waits out the settle of the run that lost the key when it is longer than its own', () => {
    const settle = (now: number) => ({ now, afterMs: 60_000, answeredSince: () => true });
    const long = { purchase: { ...uncertain.purchase, settleMs: 600_000 } };
    expect(keyVerdict(long, problem(500, 'internal', 'req_2'), settle(1_000_000 + 60_000))).toBe('kept');
    expect(keyVerdict(long, problem(500, 'internal', 'req_2'), settle(1_000_000 + 599_999))).toBe('kept');
    expect(keyVerdict(long, problem(500, 'internal', 'req_2'), settle(1_000_000 + 600_000))).toBe('settled');
    // A shorter one recorded never shortens this run's own.
    const short = { purchase: { ...uncertain.purchase, settleMs: 2_000 } };
    expect(keyVerdict(short, problem(500, 'internal', 'req_2'), settle(1_000_000 + 59_999))).toBe('kept');
  });
  // An outage answers 500 to a charged key too.
  it('never settles a key while the service has answered nothing since the key was lost', () => {
    const outage = { now: 9e12, afterMs: 60_000, answeredSince: (at: number) => at < 1_000_000 };
    expect(keyVerdict(uncertain, problem(500, 'internal', 'x'), outage)).toBe('kept');
    expect(keyVerdict(uncertain, problem(500, 'internal', 'x'), { ...outage, answeredSince: (at: number) => at <= 1_000_000 })).toBe('settled');
  });
  // A 409 is an idempotency layer's "a request under this key is still running".
  it('keeps a lost key answered 409, past the settle time too, and asks again under it', () => {
    const settle = { now: 1_000_000 + 3_600_000, afterMs: 60_000, answeredSince: () => true };
    for (const conflict of [problem(409, 'idempotency_key_in_use', 'req_4'), apiErrorFromResponse({ status: 409, contentType: 'text/plain', retryAfter: undefined, requestId: undefined, body: 'in progress' })]) {
      // Under a key never sent unanswered, nothing can be running: an error as any other.
      expect(keyVerdict(fresh, conflict)).toBe(conflict.definitive ? 'retired' : 'kept');
      expect(keyVerdict(uncertain, conflict, settle)).toBe('kept');
      expect(decideRetry(conflict, { failures: 1, rateLimited: 0 }, DEFAULT_RETRY_POLICY, () => 0.5)).toMatchObject({ retry: true });
    }
  });
  it('records nothing for a 429, which proves nothing about the key', () => {
    expect(keyVerdict(uncertain, problem(429, 'rate_limited', 'req_1'))).toBeNull();
    expect(keyVerdict(fresh, problem(429, 'rate_limited', 'req_1'))).toBeNull();
  });
});

type ErrorStep = { status: number; code: string; rid: string; beforeLookup?: boolean };
type Step = 'ok' | 'lost-after-charge' | 'lost-before' | '429' | ErrorStep | 'replay-last-error';

/**
 * A scripted idempotent service for one company: each attempt takes the next step. It charges
 * and stores like the real thing, so a double charge shows up in `charges`.
 */
function scripted(steps: Step[]) {
  const stored = new Map<string, { ok: true } | { error: ReturnType<typeof problem> }>();
  const keys: string[] = [];
  let charges = 0;
  let matches = 0;
  let last: ReturnType<typeof problem> | undefined;
  const record = (domain: string): EnrichResponse => ({
    matched: true,
    credits_charged: 1,
    credits_remaining: 100 - charges,
    company: { domain, name: domain, website_url: null, description: null, industry: null, employee_count: null, revenue_range: null, ownership_type: null, year_founded: null, specialties: [], hq_country: null, hq_city: null, last_updated: '2026-01-01T00:00:00.000Z' },
  });
  const client: ServiceClient = {
    match: async (domain) => {
      matches++;
      return { matched: true, credits_charged: 0, company: { domain, name: domain } };
    },
    enrich: async (domain, { idempotencyKey }) => {
      keys.push(idempotencyKey);
      const step = steps.shift() ?? 'ok';
      if (step === '429') throw problem(429, 'rate_limited', `rl_${keys.length}`);
      if (step === 'lost-before') throw lost();
      // A failure in front of the idempotency store: the service never looked the key up.
      if (typeof step === 'object' && step.beforeLookup === true) throw problem(step.status, step.code, step.rid);
      const prior = stored.get(idempotencyKey);
      if (prior !== undefined) {
        if ('ok' in prior) return record(domain);
        throw prior.error;
      }
      if (step === 'replay-last-error') throw last;
      if (typeof step === 'object') {
        last = problem(step.status, step.code, step.rid);
        stored.set(idempotencyKey, { error: last });
        throw last;
      }
      charges++;
      stored.set(idempotencyKey, { ok: true });
      if (step === 'lost-after-charge') throw lost();
      return record(domain);
    },
  };
  return { client, keys, charges: () => charges, matches: () => matches };
}

/** What the store hands a run that resumes acme.com's open purchase (left by a killed run). */
function resumeFrom(state: RunState, purchase: Partial<Purchase>): void {
  const d = state.addDomain('acme.com');
  state.loadDomain(d, { action: 'hit', company: 'acme.com', name: 'Acme' });
  const open = openPurchase(purchase);
  state.loadCompany(state.company('acme.com') as NonNullable<ReturnType<RunState['company']>>, { action: 'buy', generation: 1, refresh: false, held: null, resume: open });
}

async function run(
  steps: Step[],
  options: { seed?: (state: RunState) => void; maxRateLimited?: number; maxAttempts?: number; maxCredits?: number; store?: ReturnType<typeof memoryStore>; client?: (base: ServiceClient) => ServiceClient } = {},
) {
  const svc = scripted(steps);
  const state = new RunState();
  state.addDomain('acme.com');
  options.seed?.(state);
  const store = options.store ?? memoryStore();
  const stop = await execute(
    state,
    { dryRun: false, maxCredits: options.maxCredits ?? null, retry: { maxAttempts: options.maxAttempts ?? 8, maxRateLimitedAttempts: options.maxRateLimited ?? 8, baseDelayMs: 1, maxDelayMs: 2 }, matchesQueued: 4, graceMs: 100 },
    {
      client: options.client?.(svc.client) ?? svc.client,
      flow: new Flow(systemClock, 2),
      store,
      planCompany: () => {},
      clock: { now: systemClock.now, sleep: () => Promise.resolve(), until: () => Promise.resolve() },
      random: () => 0,
      idempotencyKey: (c, v) => `${c.domain}#${v}`,
      progress: new Progress().sink,
    },
    new AbortController().signal,
  );
  return { stop, keys: svc.keys, charges: svc.charges(), matches: svc.matches(), state, journal: store.events };
}

describe('paid attempts and their keys', () => {
  it('a lost answer, then a 429, then the replay: one charge, one key throughout', async () => {
    const r = await run(['lost-after-charge', '429', 'ok']);
    expect(r.keys).toStrictEqual(['acme.com#1', 'acme.com#1', 'acme.com#1']);
    expect(r.charges).toBe(1);
    expect(r.state.company('acme.com')?.status).toBe('hit');
  });

  // A requestId is no proof: it may be constant.
  it('a lost charge, then 500s with a constant requestId: the key is kept, the charge replayed', async () => {
    const constant = { status: 500, code: 'internal', rid: 'req-1', beforeLookup: true };
    const r = await run(['lost-after-charge', constant, constant, { ...constant, rid: '' }, { ...constant, rid: '' }, 'ok']);
    expect(r.keys).toStrictEqual(['acme.com#1', 'acme.com#1', 'acme.com#1', 'acme.com#1', 'acme.com#1', 'acme.com#1']);
    expect(r.charges).toBe(1);
    expect(r.state.company('acme.com')?.status).toBe('hit');
  });

  it('--max-credits counts a key that may have been charged as spent', async () => {
    const seed = (state: RunState): void => resumeFrom(state, { intentKey: 'acme.com#1', lostAt: Date.now() - 10 * 60_000 });
    const r = await run([{ status: 500, code: 'internal', rid: 'r1' }, 'ok'], { seed, maxCredits: 1, maxAttempts: 2 });
    expect(new Set(r.keys)).toStrictEqual(new Set(['acme.com#1']));
    expect(r.stop).toMatchObject({ reason: 'budget', limit: 1 });
    expect(r.charges).toBe(0);
  });

  // An outage: every request a 500, the free match too.
  it('never retires a lost key during an outage: kept, at risk, nothing bought under a new key', async () => {
    const seed = (state: RunState): void => resumeFrom(state, { intentKey: 'acme.com#1', lostAt: Date.now() - 10 * 60_000 });
    const down = { status: 500, code: 'internal', rid: 'r', beforeLookup: true };
    const svc = await run([down, down, down, down], {
      seed,
      maxAttempts: 2,
      client: (base) => ({ ...base, match: () => Promise.reject(problem(500, 'internal', 'm')) }),
    });
    expect(new Set(svc.keys)).toStrictEqual(new Set(['acme.com#1']));
    expect([svc.state.company('acme.com')?.keyVersion, svc.state.unconfirmedThisSession, svc.state.atRisk()]).toStrictEqual([1, 0, 1]);
  });

  it('a lost charged answer, then a 500 before the key was looked up: still one charge', async () => {
    const r = await run(['lost-after-charge', { status: 500, code: 'internal', rid: 'r1', beforeLookup: true }, 'ok']);
    // The 500 is fresh (new requestId), so it proves nothing: the key is reused and replays the charge.
    expect(r.keys).toStrictEqual(['acme.com#1', 'acme.com#1', 'acme.com#1']);
    expect(r.charges).toBe(1);
  });

  // Kept, its stored 500 would be replayed forever.
  it('a 500 under a key whose attempts were all answered retires the key', async () => {
    const r = await run([{ status: 500, code: 'internal', rid: 'r1' }, { status: 500, code: 'internal', rid: 'r2' }, 'ok']);
    expect(r.keys).toStrictEqual(['acme.com#1', 'acme.com#2', 'acme.com#3']);
    expect(r.charges).toBe(1);
  });

  it('a 402 stops paid calls and retires a clean key, so a resume after a top-up can buy', async () => {
    const r = await run([{ status: 402, code: 'insufficient_credits', rid: 'r1' }]);
    expect(r.stop?.reason).toBe('credits');
    const c = r.state.company('acme.com');
    expect([c?.keyVersion, c?.status, c?.errorCode]).toStrictEqual([2, 'error', 'insufficient_credits']);
  });
});

describe('a purchase this run could not finish', () => {
  it('is released for other runs once the run is done with it, and only then', async () => {
    const failed = await run(['lost-before', 'lost-before', 'lost-before'], { maxAttempts: 3 });
    expect(failed.state.company('acme.com')?.status).toBe('error');
    expect(failed.journal.at(-1)).toStrictEqual({ type: 'release', company: 'acme.com', generation: 1 });
    expect(failed.journal.filter((e) => e.type === 'release')).toHaveLength(1);
    const bought = await run(['lost-before', 'ok']);
    expect(bought.state.company('acme.com')?.status).toBe('hit');
    expect(bought.journal.some((e) => e.type === 'release')).toBe(false);
  });
});

describe('paid attempts that end without an answer', () => {
  it('ends a company whose 429s run out as an error for a rerun to retry, not as a skip', async () => {
    const r = await run(['429', '429', '429'], { maxRateLimited: 3 });
    expect(r.stop).toBeNull();
    const c = r.state.company('acme.com');
    expect([c?.status, c?.errorCode, c?.purchase.state, c?.keyVersion]).toStrictEqual(['error', 'rate_limited', 'unclaimed', 2]);
    expect(r.state.needsEnrich(c as NonNullable<typeof c>)).toBe(true);
    expect(r.charges).toBe(0);
  });

  it('on resume, a 402 under a lost key with nothing answered since neither retires nor stops', async () => {
    const seed = (state: RunState): void => resumeFrom(state, { intentKey: 'acme.com#1', uncertain: true, lostAt: Date.now() - 10 * 60_000, errorCode: 'insufficient_credits' });
    const r = await run([{ status: 402, code: 'insufficient_credits', rid: 'req_old' }, 'ok'], { seed });
    expect(r.stop).toBeNull();
    expect(new Set(r.keys)).toStrictEqual(new Set(['acme.com#1']));
    expect([r.state.unconfirmedThisSession, r.state.atRisk()]).toStrictEqual([0, 1]);
  });

  it('resumes an open intent under the key it wrote, not a recomputed one', async () => {
    const seed = (state: RunState): void => resumeFrom(state, { intentKey: 'written-by-an-older-version' });
    const r = await run(['ok'], { seed });
    expect(r.keys).toStrictEqual(['written-by-an-older-version']);
  });
});

describe('a purchase taken over from another run', () => {
  it('times the settle from the takeover, not an earlier loss: a fresh error keeps the key', async () => {
    // The plan read the key as uncertain long ago; the run that held it since has just released
    // it, and its last attempt may still be running at the service.
    const seed = (state: RunState): void => resumeFrom(state, { intentKey: 'acme.com#1', uncertain: true, lostAt: Date.now() - 10 * 60_000 });
    const store = memoryStore();
    const takeover = { ...store, append: (event: StoreEvent) => (event.type === 'intent' ? store.append(event).then(() => ({ kind: 'ok', tookOver: true }) as const) : store.append(event)) };
    // A 500 from in front of the idempotency store: fresh, so it says nothing of that attempt.
    const r = await run([{ status: 500, code: 'internal', rid: 'fresh', beforeLookup: true }, 'ok'], { seed, store: takeover as ReturnType<typeof memoryStore> });
    // Retiring the key here would buy under #2 what #1 may yet be charged for.
    expect(r.keys).toStrictEqual(['acme.com#1', 'acme.com#1']);
    expect(r.charges).toBe(1);
  });
});

describe('RunState resume from the store', () => {
  it('treats an intent with no outcome as uncertain: a resume keeps its key', () => {
    const s = new RunState();
    s.addDomain('acme.com');
    resumeFrom(s, { keyVersion: 3, intentKey: 'k3' });
    const c = s.company('acme.com');
    expect([c?.keyVersion, c?.purchase]).toStrictEqual([3, { state: 'uncertain', key: 'k3', lostAt: null, settleMs: null, error: null }]);
    expect(keyVerdict(c as NonNullable<typeof c>, problem(402, 'insufficient_credits', 'x'))).toBe('kept');
  });

  it('carries the loss time across a resume, for the settle rule on a key an earlier run lost', () => {
    const s = new RunState();
    s.addDomain('acme.com');
    resumeFrom(s, { intentKey: 'k1', lostAt: 1_000, errorCode: 'insufficient_credits' });
    const c = s.company('acme.com') as NonNullable<ReturnType<RunState['company']>>;
    expect(keyVerdict(c, problem(402, 'insufficient_credits', 'req_7'), { now: 61_000, afterMs: 60_000, answeredSince: () => true })).toBe('settled');
    s.apply({ type: 'enrich', company: 'acme.com', generation: 1, keyVersion: 1, status: 'error', code: 'insufficient_credits', verdict: 'retired', unconfirmed: true });
    expect([c.keyVersion, c.purchase, c.unconfirmed, s.unconfirmedThisSession]).toStrictEqual([2, { state: 'unclaimed', error: 'insufficient_credits' }, 1, 1]);
  });
});

describe('idempotencyKey', () => {
  // Every version and every machine of a team must derive the same key for the same purchase:
  // a key that changed between releases would buy again what the last one bought.
  it('is the one every release has sent for a purchase', () => {
    expect(idempotencyKey('s1', 'acme.com', 1, 0)).toBe('enrich-s1-1194228da8fdbdeefd261bd7-g1-v0');
    expect(idempotencyKey('s1', 'acme.com', 2, 3)).toBe('enrich-s1-1194228da8fdbdeefd261bd7-g2-v3');
  });
});
