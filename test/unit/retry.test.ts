import { describe, expect, it } from 'vitest';
import { backoffDelay, decideRetry, DEFAULT_RETRY_POLICY as P } from '../../src/api/retry.js';
import { apiErrorFromResponse, connectionError } from '../../src/api/errors.js';

const problem = (status: number, code: string, extra: Record<string, unknown> = {}) =>
  apiErrorFromResponse({ status, contentType: 'application/problem+json', retryAfter: undefined, requestId: undefined, body: JSON.stringify({ code, status, ...extra }) });
const fresh = { failures: 0, rateLimited: 0 };
const max = () => 0.999999;
const min = () => 0;

describe('decideRetry', () => {
  it('waits at least Retry-After on 429, with bounded jitter, under a new key', () => {
    const e = problem(429, 'rate_limited', { retryAfterSeconds: 2 });
    expect(decideRetry(e, fresh, P, min)).toStrictEqual({ retry: true, delayMs: 2000, sameKey: false });
    const d = decideRetry(e, { failures: 0, rateLimited: 10 }, P, max);
    expect(d.retry && d.delayMs >= 2000 && d.delayMs < 3000).toBe(true);
  });

  it('gives up on 429 after its own budget', () => {
    expect(decideRetry(problem(429, 'rate_limited'), { failures: 0, rateLimited: P.maxRateLimitedAttempts }, P, min)).toStrictEqual({ retry: false });
  });

  it('retries a 500 problem with a new key, a lost answer or a proxy 502 page with the same key', () => {
    expect(decideRetry(problem(500, 'internal'), fresh, P, min)).toMatchObject({ retry: true, sameKey: false });
    expect(decideRetry(connectionError(new Error('ECONNRESET')), fresh, P, min)).toMatchObject({ retry: true, sameKey: true });
    const page = apiErrorFromResponse({ status: 502, contentType: 'text/html', retryAfter: undefined, requestId: undefined, body: '' });
    expect(decideRetry(page, fresh, P, min)).toMatchObject({ retry: true, sameKey: true });
  });

  it.each([
    [401, 'invalid_token'],
    [402, 'insufficient_credits'],
    [403, 'insufficient_scope'],
    [422, 'validation_error'],
    [404, 'not_found'],
  ])('never retries %i %s', (status, code) => {
    expect(decideRetry(problem(status, code), fresh, P, min)).toStrictEqual({ retry: false });
  });

  it('stops after maxAttempts failures', () => {
    expect(decideRetry(problem(500, 'internal'), { failures: P.maxAttempts, rateLimited: 0 }, P, min)).toStrictEqual({ retry: false });
  });
});

describe('backoffDelay', () => {
  it('is full jitter under a doubling, capped ceiling', () => {
    const ceilings = [1, 2, 3, 4, 5, 6, 10].map((n) => backoffDelay(n, P, max));
    expect(ceilings).toStrictEqual([299, 599, 1199, 2399, 4799, 9599, 9999]);
    expect(backoffDelay(5, P, min)).toBe(0);
  });
});
