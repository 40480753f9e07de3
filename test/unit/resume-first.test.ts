import { describe, expect, it } from 'vitest';
import { apiErrorFromResponse } from '../../src/api/errors.js';
import type { ServiceClient } from '../../src/api/client.js';
import { systemClock } from '../../src/pipeline/clock.js';
import { execute } from '../../src/pipeline/execute.js';
import { AdaptiveLimiter } from '../../src/pipeline/limiter.js';
import { Progress } from '../../src/pipeline/progress.js';
import { ResumeGate } from '../../src/pipeline/resume-gate.js';
import { Scheduler } from '../../src/pipeline/scheduler.js';
import { RunState } from '../../src/pipeline/state.js';
import type { Purchase } from '../../src/store/types.js';
import { memoryStore } from '../helpers/memory-store.js';

const record = (domain: string) => ({
  matched: true as const,
  credits_charged: 1,
  credits_remaining: 10,
  company: { domain, name: domain, website_url: null, description: null, industry: null, employee_count: null, revenue_range: null, ownership_type: null, year_founded: null, specialties: [], hq_country: null, hq_city: null, last_updated: '2026-01-01T00:00:00Z' },
});

describe('keys earlier runs may have been charged under are settled before anything new is bought', () => {
  it('sends no new purchase until every resumed key has had an answer', async () => {
    const state = new RunState();
    const names = ['new-1.com', 'new-2.com', 'new-3.com', 'resumed.com'];
    for (const domain of names) state.loadDomain(state.addDomain(domain), { action: 'hit', company: domain, name: domain });
    const open: Purchase = { domain: 'resumed.com', generation: 1, keyVersion: 1, intentKey: 'resumed.com#1', uncertain: true, unconfirmed: 0, lostAt: Date.now(), errorCode: null, outcome: 'open', closedAt: null };
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
    const stop = await execute(
      state,
      { dryRun: false, maxCredits: null, retry: { maxAttempts: 4, maxRateLimitedAttempts: 4, baseDelayMs: 1, maxDelayMs: 2 }, matchWindow: 4, graceMs: 100 },
      {
        client,
        scheduler: new Scheduler(new AdaptiveLimiter({ clock: systemClock }), systemClock, 8),
        store: memoryStore(),
        planCompany: () => {},
        clock: { now: systemClock.now, sleep: () => Promise.resolve(), until: () => Promise.resolve() },
        random: () => 0,
        idempotencyKey: (c, v) => `${c.domain}#${v}`,
        progress: new Progress().sink,
      },
      new AbortController().signal,
    );
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
});
