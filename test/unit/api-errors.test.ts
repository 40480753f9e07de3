import { describe, expect, it } from 'vitest';
import type {
  RateLimitedError} from '../../src/api/errors.js';
import {
  ApiError,
  InsufficientCreditsError,
  InsufficientScopeError,
  InternalServerError,
  InvalidTokenError,
  NotServiceApiError,
  UnexpectedResponseError,
  ValidationError,
  apiErrorFromResponse,
  ConnectionError,
  connectionError,
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

  it.each([
    [402, 'plan_cap_reached', InsufficientCreditsError],
    [401, 'token_expired', InvalidTokenError],
    [403, 'key_suspended', InsufficientScopeError],
  ])('an unknown %i code (%s) takes its status class, keeping its code and detail', (status, code, Class) => {
    const e = problem(status, { code, status, detail: 'ask your admin' });
    expect(e).toBeInstanceOf(Class);
    expect(e).toMatchObject({ code, definitive: true });
    expect(e.message).toBe(`${code} (HTTP ${status}): ask your admin`);
  });

  it('reads balance and required only when they are counts', () => {
    const e = problem(402, { code: 'insufficient_credits', balance: '12', required: -1 }) as InsufficientCreditsError;
    expect([e.balance, e.required]).toStrictEqual([undefined, undefined]);
  });

  // Never a miss or a row error.
  it.each([
    ['a problem document (the sandbox, a mistyped path)', 'application/problem+json', JSON.stringify({ code: 'not_found', status: 404 })],
    ['an unknown code', 'application/problem+json', JSON.stringify({ code: 'route_missing', status: 404 })],
    ['an HTML page', 'text/html', '<h1>Not Found</h1>'],
    ['no body', '', ''],
  ])('a 404 with %s is not the service API', (_what, contentType, body) => {
    const e = apiErrorFromResponse({ status: 404, contentType, retryAfter: undefined, requestId: undefined, body });
    expect(e).toBeInstanceOf(NotServiceApiError);
    expect(e.code).toBe('not_service_api');
    expect(e.message).toMatch(/does not answer as the service API .*check the base URL/);
  });

  it('a 405 is not the service API either', () => {
    expect(problem(405, { code: 'method_not_allowed', status: 405 })).toBeInstanceOf(NotServiceApiError);
  });

  // A gateway may stand in front of a service that ran the call.
  it('treats a 502, 503 or 504 as an unknown outcome, even with a problem body', () => {
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

describe('connectionError', () => {
  const sys = (code: string, message = code): Error => Object.assign(new Error(message), { code });
  it.each([
    [sys('ENOTFOUND', 'getaddrinfo ENOTFOUND data.example.com'), 'dns', 'cannot reach data.example.com: DNS lookup failed'],
    [sys('EAI_AGAIN'), 'dns', 'cannot reach data.example.com: DNS lookup failed'],
    [sys('ECONNREFUSED'), 'refused', 'cannot reach data.example.com: connection refused'],
    [sys('EHOSTUNREACH'), 'unreachable', 'cannot reach data.example.com: network unreachable'],
    [sys('ERR_SSL_WRONG_VERSION_NUMBER'), 'tls', 'cannot reach data.example.com: TLS failed (ERR_SSL_WRONG_VERSION_NUMBER)'],
    [sys('DEPTH_ZERO_SELF_SIGNED_CERT'), 'tls', 'cannot reach data.example.com: TLS failed (DEPTH_ZERO_SELF_SIGNED_CERT)'],
    [sys('UND_ERR_CONNECT_TIMEOUT'), 'timeout', 'no answer from data.example.com: connect timed out'],
    [sys('UND_ERR_HEADERS_TIMEOUT'), 'timeout', 'no answer from data.example.com: no response headers in time'],
    [sys('ECONNRESET'), 'reset', 'no answer from data.example.com: the connection was reset'],
    [sys('UND_ERR_SOCKET', 'other side closed'), 'reset', 'no answer from data.example.com: the connection was reset'],
    [new TypeError('fetch failed', { cause: sys('ENOTFOUND') }), 'dns', 'cannot reach data.example.com: DNS lookup failed'],
    [sys('EWHATEVER'), 'other', 'no answer from data.example.com: EWHATEVER'],
  ])('%s -> %s', (cause, failure, message) => {
    const e = connectionError(cause, 'data.example.com');
    expect(e).toBeInstanceOf(ConnectionError);
    expect(e).toMatchObject({ host: 'data.example.com', failure, code: 'network_error', definitive: false, message });
    expect(e.neverSent).toBe(['dns', 'refused', 'unreachable', 'tls'].includes(failure));
  });
});
