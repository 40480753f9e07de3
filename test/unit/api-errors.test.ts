import { describe, expect, it } from 'vitest';
import type {
  RateLimitedError} from '../../src/api/errors.js';
import {
  ApiError,
  InsufficientCreditsError,
  InsufficientScopeError,
  InternalServerError,
  InvalidTokenError,
  UnexpectedResponseError,
  ValidationError,
  apiErrorFromResponse,
} from '../../src/api/errors.js';

const problem = (status: number, body: Record<string, unknown>, retryAfter?: string) =>
  apiErrorFromResponse({ status, contentType: 'application/problem+json', retryAfter, requestId: 'hdr_1', body: JSON.stringify(body) });

describe('apiErrorFromResponse', () => {
  it.each([
    [401, 'invalid_token', InvalidTokenError],
    [403, 'insufficient_scope', InsufficientScopeError],
    [402, 'insufficient_credits', InsufficientCreditsError],
    [422, 'validation_error', ValidationError],
    [500, 'internal', InternalServerError],
  ])('%i %s -> its class, definitive', (status, code, Class) => {
    const e = problem(status, { type: `x/${code}`, title: 't', status, code, requestId: 'req_9' });
    expect(e).toBeInstanceOf(Class);
    expect(e).toMatchObject({ status, code, requestId: 'req_9', definitive: true });
  });

  it('reads retryAfterSeconds, else the Retry-After header, and never less than 1', () => {
    expect((problem(429, { code: 'rate_limited', retryAfterSeconds: 3 }) as RateLimitedError).retryAfterSeconds).toBe(3);
    expect((problem(429, { code: 'rate_limited' }, '7') as RateLimitedError).retryAfterSeconds).toBe(7);
    expect((problem(429, { code: 'rate_limited' }, '0') as RateLimitedError).retryAfterSeconds).toBe(1);
    expect((problem(429, { code: 'rate_limited' }) as RateLimitedError).retryAfterSeconds).toBe(1);
  });

  it('carries balance and required on 402', () => {
    const e = problem(402, { code: 'insufficient_credits', balance: 3, required: 1 }) as InsufficientCreditsError;
    expect([e.balance, e.required]).toStrictEqual([3, 1]);
  });

  it('falls back on the status class for codes it does not know', () => {
    expect(problem(403, { code: 'key_suspended' })).toBeInstanceOf(InsufficientScopeError);
    expect(problem(503, { code: 'maintenance' })).toBeInstanceOf(InternalServerError);
    expect(problem(503, { code: 'maintenance' }).definitive).toBe(false);
    const teapot = problem(418, { code: 'teapot' });
    expect(teapot.constructor).toBe(ApiError);
    expect(teapot.definitive).toBe(true);
  });

  it('treats a 502, 503 or 504 as an unknown outcome even with a problem body: a gateway may stand in front of a service that ran the call', () => {
    for (const status of [502, 503, 504]) {
      const e = apiErrorFromResponse({ status, contentType: 'application/problem+json', retryAfter: undefined, requestId: undefined, body: JSON.stringify({ code: 'upstream_timeout', status }) });
      expect(e.definitive, String(status)).toBe(false);
    }
    const json = apiErrorFromResponse({ status: 500, contentType: 'application/json', retryAfter: undefined, requestId: undefined, body: JSON.stringify({ code: 'internal', status: 500 }) });
    expect(json.definitive).toBe(false);
  });

  it('treats an answer that is not a problem document as an unknown outcome', () => {
    const e = apiErrorFromResponse({ status: 502, contentType: 'text/html', retryAfter: undefined, requestId: undefined, body: '<h1>Bad gateway</h1>' });
    expect(e).toBeInstanceOf(UnexpectedResponseError);
    expect(e.definitive).toBe(false);
  });
});
