import { describe, expect, it } from 'vitest';
import { apiErrorFromResponse } from '../../src/api/errors.js';
import type { ServiceClient } from '../../src/api/client.js';
import { systemClock } from '../../src/pipeline/clock.js';
import { execute, type EventSink } from '../../src/pipeline/execute.js';
import type { Clock } from '../../src/pipeline/clock.js';
import { Progress } from '../../src/pipeline/progress.js';
import { ResumeGate } from '../../src/pipeline/enrich-step.js';
import { Flow } from '../../src/pipeline/flow.js';
import { RunState } from '../../src/pipeline/state.js';
import { memoryStore } from '../helpers/memory-store.js';
import { companyRecord, openPurchase } from '../helpers/records.js';

const record = (domain: string) => ({ matched: true as const, credits_charged: 1, credits_remaining: 10, company: companyRecord(domain) });

/** execute() over `state` with quick retries, instant sleeps (unless `clock` says otherwise) and a memory store. */
function run(state: RunState, client: ServiceClient, over: { store?: EventSink; clock?: Clock; busyPollMs?: number; interrupt?: AbortSignal } = {}) {
  return execute(
    state,
    { dryRun: false, maxCredits: null, retry: { maxAttempts: 3, maxRateLimitedAttempts: 3, baseDelayMs: 1, maxDelayMs: 2 }, matchesQueued: 4, graceMs: 100, ...(over.busyPollMs === undefined ? {} : { busyPollMs: over.busyPollMs }) },
    {
      client,
      flow: new Flow(systemClock, 8),
      store: over.store ?? memoryStore(),
      planCompany: () => {},
      clock: over.clock ?? { now: systemClock.now, sleep: () => Promise.resolve(), until: () => Promise.resolve() },
      random: () => 0,
      idempotencyKey: (c, v) => `${c.domain}#${v}`,
      progress: new Progress().sink,
    },
    over.interrupt ?? new AbortController().signal,
  );
}

describe('keys earlier runs may have been charged under are settled before anything new is bought', () => {
  it('sends no new purchase until every resumed key has had an answer', async () => {
    const state = new RunState();
    const names = ['new-1.com', 'new-2.com', 'new-3.com', 'resumed.com'];
    for (const domain of names) state.loadDomain(state.addDomain(domain), { action: 'hit', company: domain, name: domain });
    const open = openPurchase({ domain: 'resumed.com', intentKey: 'resumed.com#1', uncertain: true, lostAt: Date.now() });
    for (const c of state.companies) state.loadCompany(c, c.domain === 'resumed.com' ? { action: 'buy', generation: 1, refresh: false, held: null, resume: open } : { action: 'buy', generation: 1, refresh: false, held: null, resume: null });
    const calls: string[] = [];
    let resumedTries = 0;
    const client: ServiceClient = {
      match: async (domain) => ({ matched: true, credits_charged: 0, company: { domain, name: domain } }),
      enrich: async (domain) => {
        calls.push(domain);
        // The resumed key answers (a 500, then its replay) only after a while: the others must wait for its first answer.
        if (domain === 'resumed.com' && resumedTries++ === 0) {
          await new Promise((r) => setTimeout(r, 20));
          calls.push('(resumed.com answered)');
          throw apiErrorFromResponse({ status: 500, contentType: 'application/problem+json', retryAfter: undefined, requestId: undefined, body: JSON.stringify({ code: 'internal', status: 500 }) });
        }
        return record(domain);
      },
    };
    const stop = await run(state, client);
    expect(stop).toBeNull();
    expect(calls.slice(0, 2)).toStrictEqual(['resumed.com', '(resumed.com answered)']);
    expect(state.companies.every((c) => c.status === 'hit')).toBe(true);
  });

  it('the gate opens when the last company it holds arrives, or at once for none', async () => {
    const gate = new ResumeGate([1, 2]);
    let open = false;
    void gate.wait(new AbortController().signal).then(() => (open = true));
    gate.arrive(1);
    gate.arrive(1);
    await Promise.resolve();
    expect(open).toBe(false);
    gate.arrive(2);
    await new Promise((r) => setTimeout(r, 0));
    expect(open).toBe(true);
    await new ResumeGate([]).wait(new AbortController().signal);
  });

  /** resumed.com left a lost key (#1) ten minutes ago; new.com is new. `resumedAnswer(key)` answers resumed.com. */
  async function twoCompanies(resumedAnswer: (key: string) => 'ok' | 402 | 500) {
    const state = new RunState();
    for (const domain of ['new.com', 'resumed.com']) state.loadDomain(state.addDomain(domain), { action: 'hit', company: domain, name: domain });
    const open = openPurchase({ domain: 'resumed.com', intentKey: 'resumed.com#1', uncertain: true, lostAt: Date.now() - 10 * 60_000 });
    for (const c of state.companies) state.loadCompany(c, { action: 'buy', generation: 1, refresh: false, held: null, resume: c.domain === 'resumed.com' ? open : null });
    const keys: string[] = [];
    const problem = (status: number, code: string) =>
      apiErrorFromResponse({ status, contentType: 'application/problem+json', retryAfter: undefined, requestId: undefined, body: JSON.stringify({ code, status, balance: 0, required: 1 }) });
    const client: ServiceClient = {
      match: async (domain) => ({ matched: true, credits_charged: 0, company: { domain, name: domain } }),
      enrich: async (domain, { idempotencyKey }) => {
        keys.push(idempotencyKey);
        const answer = domain === 'resumed.com' ? resumedAnswer(idempotencyKey) : 'ok';
        if (answer === 402) throw problem(402, 'insufficient_credits');
        if (answer === 500) throw problem(500, 'internal');
        return record(domain);
      },
    };
    const stop = await run(state, client);
    return { stop, keys, state };
  }

  // Bought under a new key, the old one counted as possibly charged.
  it('a lost key answered only with a stored 500 is retired once the endpoint answers afresh', async () => {
    const r = await twoCompanies((key) => (key.endsWith('#1') ? 500 : 'ok'));
    expect(r.stop).toBeNull();
    expect(r.keys.filter((k) => k.startsWith('resumed')).at(-1)).toBe('resumed.com#2');
    expect(r.state.companies.map((c) => c.status)).toStrictEqual(['hit', 'hit']);
    expect([r.state.creditsThisSession, r.state.unconfirmedThisSession]).toStrictEqual([2, 1]);
  });

  it('a 402 under the lost key is taken for a stored one: the run goes on under a new key', async () => {
    const r = await twoCompanies((key) => (key.endsWith('#1') ? 402 : 'ok'));
    expect(r.stop).toBeNull();
    expect(r.state.company('resumed.com')?.status).toBe('hit');
    expect(r.state.unconfirmedThisSession).toBe(1);
  });

  it('a 402 under the new key stops the run for credits, with the possibly charged key counted', async () => {
    const r = await twoCompanies(() => 402);
    expect(r.stop?.reason).toBe('credits');
    expect(r.keys).toContain('resumed.com#2');
    expect(r.state.unconfirmedThisSession).toBe(1);
  });

  it('a resumed key busy in another live run holds no new purchase back', async () => {
    const state = new RunState();
    for (const domain of ['held-by-other.com', 'new-1.com', 'new-2.com']) state.loadDomain(state.addDomain(domain), { action: 'hit', company: domain, name: domain });
    const open = openPurchase({ domain: 'held-by-other.com', intentKey: 'held-by-other.com#1', lostAt: Date.now() });
    for (const c of state.companies) state.loadCompany(c, { action: 'buy', generation: 1, refresh: false, held: null, resume: c.domain === 'held-by-other.com' ? open : null });
    const bought: string[] = [];
    const interrupt = new AbortController();
    const base = memoryStore();
    // The other run is alive and holds held-by-other.com: its claim answers busy for as long as this run lasts.
    const store = { ...base, append: (event: Parameters<typeof base.append>[0], durable?: boolean) => (event.type === 'intent' && event.company === 'held-by-other.com' ? Promise.resolve({ kind: 'busy' as const, pid: 4242 }) : base.append(event, durable)) };
    const client: ServiceClient = {
      match: async (domain) => ({ matched: true, credits_charged: 0, company: { domain, name: domain } }),
      enrich: async (domain) => {
        bought.push(domain);
        // Both new ones bought while the busy one still waits: the test is done (progress, not time).
        if (bought.length === 2) interrupt.abort();
        return record(domain);
      },
    };
    await run(state, client, { store, clock: systemClock, busyPollMs: 1, interrupt: interrupt.signal });
    expect(bought.sort()).toStrictEqual(['new-1.com', 'new-2.com']);
  });
});
