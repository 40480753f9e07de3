import { describe, expect, it } from 'vitest';
import { backoffDelay, decideRetry, DEFAULT_RETRY_POLICY as P, MAX_TIMER_MS } from '../../src/api/retry.js';
import { apiErrorFromResponse, connectionError, RateLimitedError } from '../../src/api/errors.js';

const problem = (status: number, code: string, extra: Record<string, unknown> = {}) =>
  apiErrorFromResponse({ status, contentType: 'application/problem+json', retryAfter: undefined, requestId: undefined, body: JSON.stringify({ code, status, ...extra }) });
const max = () => 0.999999;
const min = () => 0;
// Counts include the failure being decided on.
const first = { failures: 1, rateLimited: 0 };
const first429 = { failures: 0, rateLimited: 1 };

describe('decideRetry', () => {
  it('waits at least Retry-After on 429, plus a backoff with jitter', () => {
    const e = problem(429, 'rate_limited', { retryAfterSeconds: 2 });
    // Equal jitter on the first 429: half of baseDelayMs for sure, up to all of it.
    expect(decideRetry(e, first429, P, min)).toStrictEqual({ retry: true, delayMs: 2000 + P.baseDelayMs / 2 });
    expect(decideRetry(e, first429, P, max)).toStrictEqual({ retry: true, delayMs: 2000 + P.baseDelayMs - 1 });
  });

  // Spec 7.3.
  it('backs off exponentially on top of Retry-After while a request keeps getting 429s', () => {
    const e = problem(429, 'rate_limited', { retryAfterSeconds: 1 });
    const waits = (random: () => number) => [1, 2, 3, 4, 5, 6, 7, 8].map((n) => {
      const d = decideRetry(e, { failures: 0, rateLimited: n }, P, random);
      if (!d.retry) throw new Error('expected a retry');
      return d.delayMs;
    });
    const low = waits(min);
    const high = waits(max);
    expect(low).toStrictEqual([1150, 1300, 1600, 2200, 3400, 5800, 6000, 6000]);
    // Even the luckiest draw of a later 429 waits longer than the unluckiest of an earlier one, up to the cap.
    for (let i = 1; i < 6; i++) expect(low[i] as number).toBeGreaterThanOrEqual(high[i - 1] as number);
    expect(high.every((d, i) => d >= (low[i] as number) && d <= 1000 + P.maxDelayMs)).toBe(true);
  });

  it('gives up with the wait asked for when Retry-After is past maxRetryAfterSeconds', () => {
    const day = problem(429, 'rate_limited', { retryAfterSeconds: 86_400 });
    expect(decideRetry(day, first429, P, min)).toStrictEqual({ retry: false, giveUp: 'wait_too_long', waitSeconds: 86_400 });
    const exactly = problem(429, 'rate_limited', { retryAfterSeconds: 300 });
    expect(decideRetry(exactly, first429, P, min)).toMatchObject({ retry: true, delayMs: 300_150 });
    expect(decideRetry(exactly, first429, { ...P, maxRetryAfterSeconds: 299 }, min)).toStrictEqual({ retry: false, giveUp: 'wait_too_long', waitSeconds: 300 });
  });

  it('never asks for a timer past 2^31-1 ms, whatever the policy allows', () => {
    const years = problem(429, 'rate_limited', { retryAfterSeconds: 10 ** 9 });
    const lax = { ...P, maxRetryAfterSeconds: Number.POSITIVE_INFINITY };
    expect(decideRetry(years, first429, lax, max)).toStrictEqual({ retry: true, delayMs: MAX_TIMER_MS });
    const huge = { ...P, baseDelayMs: 2 ** 40, maxDelayMs: 2 ** 50 };
    const d = decideRetry(problem(500, 'internal'), first, huge, max);
    expect(d.retry && d.delayMs).toBe(MAX_TIMER_MS);
  });

  it('treats a 429 without a problem document (a gateway) as a 429 too', () => {
    const e = apiErrorFromResponse({ status: 429, contentType: 'text/html', retryAfter: '3', requestId: undefined, body: '<h1>slow down</h1>' });
    expect(e).toBeInstanceOf(RateLimitedError);
    expect(decideRetry(e, first429, P, min)).toStrictEqual({ retry: true, delayMs: 3000 + P.baseDelayMs / 2 });
  });

  it('allows exactly maxRateLimitedAttempts 429s and maxAttempts failures, no more', () => {
    expect(decideRetry(problem(429, 'rate_limited'), { failures: 0, rateLimited: P.maxRateLimitedAttempts - 1 }, P, min).retry).toBe(true);
    expect(decideRetry(problem(429, 'rate_limited'), { failures: 0, rateLimited: P.maxRateLimitedAttempts }, P, min)).toStrictEqual({ retry: false });
    expect(decideRetry(problem(500, 'internal'), { failures: P.maxAttempts - 1, rateLimited: 0 }, P, min).retry).toBe(true);
    expect(decideRetry(problem(500, 'internal'), { failures: P.maxAttempts, rateLimited: 0 }, P, min)).toStrictEqual({ retry: false });
  });

  it('retries a 500, a lost answer and a proxy 502 page', () => {
    expect(decideRetry(problem(500, 'internal'), first, P, min)).toMatchObject({ retry: true });
    expect(decideRetry(connectionError(new Error('ECONNRESET')), first, P, min)).toMatchObject({ retry: true });
    const page = apiErrorFromResponse({ status: 502, contentType: 'text/html', retryAfter: undefined, requestId: undefined, body: '' });
    expect(decideRetry(page, first, P, min)).toMatchObject({ retry: true });
  });

  it.each([
    [401, 'invalid_token'],
    [402, 'insufficient_credits'],
    [403, 'insufficient_scope'],
    [422, 'validation_error'],
    [404, 'not_found'],
    [402, 'plan_cap_reached'],
    [403, 'key_suspended'],
  ])('never retries %i %s', (status, code) => {
    expect(decideRetry(problem(status, code), first, P, min)).toStrictEqual({ retry: false });
  });

  it('never retries an answer not from the service (a 404 page, a 405) or a call aborted', () => {
    const page = apiErrorFromResponse({ status: 404, contentType: 'text/html', retryAfter: undefined, requestId: undefined, body: '<h1>Not Found</h1>' });
    expect(decideRetry(page, first, P, min)).toStrictEqual({ retry: false });
    const aborted = connectionError(Object.assign(new Error('aborted'), { name: 'AbortError' }), 'h');
    expect(aborted.failure).toBe('aborted');
    expect(decideRetry(aborted, first, P, min)).toStrictEqual({ retry: false });
  });
});

describe('backoffDelay', () => {
  it('is full jitter under a doubling, capped ceiling', () => {
    const ceilings = [1, 2, 3, 4, 5, 6, 10].map((n) => backoffDelay(n, P, max));
    expect(ceilings).toStrictEqual([299, 599, 1199, 2399, 4799, 9599, 9999]);
    expect(backoffDelay(5, P, min)).toBe(0);
  });
});
