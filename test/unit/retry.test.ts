import { describe, expect, it } from 'vitest';
import { backoffDelay, decideRetry, DEFAULT_RETRY_POLICY as P } from '../../src/api/retry.js';
import { apiErrorFromResponse, connectionError, RateLimitedError } from '../../src/api/errors.js';

const problem = (status: number, code: string, extra: Record<string, unknown> = {}) =>
  apiErrorFromResponse({ status, contentType: 'application/problem+json', retryAfter: undefined, requestId: undefined, body: JSON.stringify({ code, status, ...extra }) });
const max = () => 0.999999;
const min = () => 0;
// Counts include the failure being decided on.
const first = { failures: 1, rateLimited: 0 };
const first429 = { failures: 0, rateLimited: 1 };

describe('decideRetry', () => {
  it('waits at least Retry-After on 429, with bounded jitter', () => {
    const e = problem(429, 'rate_limited', { retryAfterSeconds: 2 });
    expect(decideRetry(e, first429, P, min)).toStrictEqual({ retry: true, delayMs: 2000 });
    const d = decideRetry(e, { failures: 0, rateLimited: 10 }, P, max);
    expect(d.retry && d.delayMs >= 2000 && d.delayMs < 3000).toBe(true);
  });

  it('treats a 429 without a problem document (a gateway) as a 429 too', () => {
    const e = apiErrorFromResponse({ status: 429, contentType: 'text/html', retryAfter: '3', requestId: undefined, body: '<h1>slow down</h1>' });
    expect(e).toBeInstanceOf(RateLimitedError);
    expect(decideRetry(e, first429, P, min)).toStrictEqual({ retry: true, delayMs: 3000 });
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
  ])('never retries %i %s', (status, code) => {
    expect(decideRetry(problem(status, code), first, P, min)).toStrictEqual({ retry: false });
  });
});

describe('backoffDelay', () => {
  it('is full jitter under a doubling, capped ceiling', () => {
    const ceilings = [1, 2, 3, 4, 5, 6, 10].map((n) => backoffDelay(n, P, max));
    expect(ceilings).toStrictEqual([299, 599, 1199, 2399, 4799, 9599, 9999]);
    expect(backoffDelay(5, P, min)).toBe(0);
  });
});
