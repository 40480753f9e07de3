import { afterEach, describe, expect, it } from 'vitest';
import { getEventListeners } from 'node:events';
import type { ServerResponse } from 'node:http';
import { createClient, createDispatcher, type ClientOptions, type ServiceClient } from '../src/api/client.js';
import {
  ConnectionError,
  InsufficientCreditsError,
  InsufficientScopeError,
  NotServiceApiError,
  UnexpectedResponseError,
} from '../src/api/errors.js';
import { startSandbox } from '../src/sandbox/index.js';
import { Pool } from 'undici';
import { closedPort, hostileServer, json, rawServer, type Hostile } from './helpers/hostile.js';

const KEY = 'sk_live_secret_do_not_print_0123456789';
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function client(baseUrl: string, options: Partial<ClientOptions> = {}): ServiceClient {
  const dispatcher = createDispatcher(baseUrl, 2);
  cleanups.push(() => dispatcher.destroy());
  return createClient({ baseUrl, apiKey: KEY, dispatcher, userAgent: 'test', ...options });
}

async function hostile(handler: Parameters<typeof hostileServer>[0]): Promise<Hostile> {
  const server = await hostileServer(handler);
  cleanups.push(() => server.close());
  return server;
}

/** The error a call fails with; the test fails if it succeeds. */
async function failure(call: Promise<unknown>): Promise<Error> {
  const outcome = await call.then(
    (value) => ({ value }),
    (error: unknown) => ({ error }),
  );
  if (!('error' in outcome)) throw new Error(`expected a failure, got ${JSON.stringify(outcome.value)}`);
  const error = outcome.error as Error;
  // Whatever went wrong, the key is never part of what is shown.
  expect(`${error.message} ${String(error.stack)}`).not.toContain(KEY);
  return error;
}

it("the dispatcher is undici's own Pool, from the package's public entry", () => {
  const dispatcher = createDispatcher('http://127.0.0.1:9', 2);
  cleanups.push(() => dispatcher.destroy());
  expect(dispatcher).toBeInstanceOf(Pool);
});

describe('connection failures name the host and the cause', () => {
  it('DNS: a host that cannot resolve', async () => {
    const e = await failure(client('https://data.enrich-test.invalid').match('acme.com'));
    expect(e).toBeInstanceOf(ConnectionError);
    expect(e).toMatchObject({ failure: 'dns', host: 'data.enrich-test.invalid', neverSent: true });
    expect(e.message).toBe('cannot reach data.enrich-test.invalid: DNS lookup failed');
  });

  it('connection refused', async () => {
    const port = await closedPort();
    const e = await failure(client(`http://127.0.0.1:${port}`).match('acme.com'));
    expect(e).toMatchObject({ failure: 'refused', host: `127.0.0.1:${port}`, neverSent: true, message: `cannot reach 127.0.0.1:${port}: connection refused` });
  });

  it('TLS: an https address that does not speak TLS', async () => {
    const server = await rawServer((s) => s.on('data', () => s.end('HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n')));
    cleanups.push(() => server.close());
    const e = await failure(client(`https://127.0.0.1:${server.port}`).match('acme.com'));
    expect(e).toMatchObject({ failure: 'tls', neverSent: true });
    expect(e.message).toMatch(new RegExp(`^cannot reach 127.0.0.1:${server.port}: TLS failed \\(`));
  });

  it('reset: the connection drops after the request went out (it may have run)', async () => {
    const server = await hostile((req) => req.socket.destroy());
    const e = await failure(client(server.url).enrich('acme.com', { idempotencyKey: 'k1' }));
    expect(e).toMatchObject({ failure: 'reset', neverSent: false, definitive: false });
    expect(e.message).toMatch(/^no answer from 127\.0\.0\.1:\d+: the connection was reset$/);
  });

  it('a server that accepts and never answers hits the idle timeout', async () => {
    const server = await hostile(() => {});
    const e = await failure(client(server.url, { timeoutMs: 100 }).match('acme.com'));
    expect(e).toMatchObject({ failure: 'timeout', neverSent: false });
  });

  it('a body dripped a byte at a time hits the whole-request deadline, though never idle', async () => {
    const server = await hostile((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"matched":');
      const drip = setInterval(() => res.write(' '), 5);
      res.on('close', () => clearInterval(drip));
    });
    const e = await failure(client(server.url, { timeoutMs: 60_000, deadlineMs: 200 }).match('acme.com'));
    expect(e).toBeInstanceOf(ConnectionError);
    expect(e).toMatchObject({ failure: 'timeout', causeText: 'no complete answer within 200 ms' });
  });

  it('headers dripped a line at a time hit the deadline too', async () => {
    const server = await rawServer((s) =>
      s.once('data', () => {
        s.write('HTTP/1.1 200 OK\r\n');
        const drip = setInterval(() => s.write('x-padding: 1\r\n'), 5);
        s.on('close', () => clearInterval(drip));
      }),
    );
    cleanups.push(() => server.close());
    const e = await failure(client(`http://127.0.0.1:${server.port}`, { timeoutMs: 60_000, deadlineMs: 200 }).match('acme.com'));
    expect(e).toMatchObject({ failure: 'timeout', neverSent: false });
  });

  it('the caller abort is told apart from the deadline', async () => {
    const server = await hostile(() => {});
    const controller = new AbortController();
    const call = client(server.url, { deadlineMs: 60_000 }).match('acme.com', { signal: controller.signal });
    setTimeout(() => controller.abort(new Error('stop')), 20);
    expect(await failure(call)).toMatchObject({ failure: 'aborted' });
  });

  it('a call aborted while it waits for a connection ends at once and never goes out', async () => {
    const server = await hostile(() => {});
    // Two connections (the test client's pool), both held by calls the server never answers.
    const held = new AbortController();
    const c = client(server.url, { deadlineMs: 60_000 });
    const busy = [c.match('a.com', { signal: held.signal }), c.match('b.com', { signal: held.signal })];
    const controller = new AbortController();
    const queued = c.match('c.com', { signal: controller.signal });
    while (server.requests < 2) await new Promise((r) => setTimeout(r, 5));
    controller.abort(new Error('stop'));
    expect(await failure(queued)).toMatchObject({ failure: 'aborted' });
    held.abort();
    for (const call of busy) expect(await failure(call)).toMatchObject({ failure: 'aborted' });
    expect(server.requests).toBe(2);
  });

  it('calls under one signal share one abort listener, and its abort stops every open call', async () => {
    const server = await hostile((req, res) => json(res, 200, { matched: false, credits_charged: 0, company: null }));
    const c = client(server.url);
    const controller = new AbortController();
    await Promise.all([c.match('a.com', { signal: controller.signal }), c.match('b.com', { signal: controller.signal })]);
    await c.match('c.com', { signal: controller.signal });
    // One listener whatever the number of calls: none added and removed per call (exchange.ts).
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(1);
    const held = await hostile(() => {});
    const h = client(held.url, { deadlineMs: 60_000 });
    const open = [h.match('d.com', { signal: controller.signal }), h.match('e.com', { signal: controller.signal })];
    while (held.requests < 2) await new Promise((r) => setTimeout(r, 5));
    controller.abort(new Error('stop'));
    for (const call of open) expect(await failure(call)).toMatchObject({ failure: 'aborted' });
  });

  it('an answer that arrives in pieces, each well inside the deadline, is read whole', async () => {
    const server = await hostile((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"matched":');
      setTimeout(() => res.end('false,"credits_charged":0,"company":null}'), 30);
    });
    expect(await client(server.url, { deadlineMs: 5_000 }).match('acme.com')).toStrictEqual({ matched: false, credits_charged: 0, company: null });
  });
});

/** Streams `total` bytes of JSON-ish filler as fast as the client reads; counts what left. */
function flood(res: ServerResponse, total: number, declare: boolean, sent: { bytes: number }): void {
  res.writeHead(200, { 'content-type': 'application/json', ...(declare ? { 'content-length': String(total) } : {}) });
  const chunk = Buffer.alloc(64 * 1024, 0x20);
  const pump = (): void => {
    while (sent.bytes < total && !res.destroyed) {
      sent.bytes += chunk.length;
      if (!res.write(chunk)) {
        res.once('drain', pump);
        return;
      }
    }
    if (!res.destroyed) res.end();
  };
  pump();
}

describe('a bounded answer', () => {
  it.each([
    ['chunked', false],
    ['with its content-length', true],
  ])('a 100 MB answer (%s) is a bad_response once maxResponseBytes are read', async (_how, declare) => {
    const sent = { bytes: 0 };
    const server = await hostile((_req, res) => flood(res, 100 * 1024 * 1024, declare, sent));
    const e = await failure(client(server.url).match('acme.com'));
    expect(e).toBeInstanceOf(UnexpectedResponseError);
    expect(e).toMatchObject({ code: 'bad_response', definitive: false });
    expect(e.message).toMatch(/over 1048576 bytes/);
    // Socket buffers let some megabytes out before the reader stops; nowhere near 100.
    expect(sent.bytes).toBeLessThan(48 * 1024 * 1024);
  });

  it('an answer under the bound reads as usual', async () => {
    const name = 'x'.repeat(200_000);
    const server = await hostile((_req, res) => json(res, 200, { matched: true, credits_charged: 0, company: { domain: 'acme.com', name } }));
    expect(await client(server.url).match('acme.com')).toStrictEqual({ matched: true, credits_charged: 0, company: { domain: 'acme.com', name } });
  });
});

describe('an address that is not the service API', () => {
  it('a wrong base path on the sandbox (404 not_found) is NotServiceApiError, not a miss', async () => {
    const sb = await startSandbox();
    cleanups.push(() => sb.close());
    const e = await failure(client(`${sb.url}/wrong/prefix`).match('acme.com'));
    expect(e).toBeInstanceOf(NotServiceApiError);
    expect(e).toMatchObject({ status: 404, code: 'not_service_api' });
  });

  it.each([
    ['a 404 page', 404, 'text/html', '<h1>Not Found</h1>'],
    ['a 404 problem with an unknown code', 404, 'application/problem+json', '{"code":"no_route","status":404}'],
    ['a 200 HTML page', 200, 'text/html; charset=utf-8', '<html>welcome</html>'],
  ])('%s', async (_what, status, contentType, body) => {
    const server = await hostile((_req, res) => {
      res.writeHead(status, { 'content-type': contentType });
      res.end(body);
    });
    expect(await failure(client(server.url).enrich('acme.com', { idempotencyKey: 'k' }))).toBeInstanceOf(NotServiceApiError);
  });

  it('a 200 that is JSON but broken stays a bad_response (the service, misbehaving)', async () => {
    const server = await hostile((_req, res) => json(res, 200, { hello: 1 }));
    const e = await failure(client(server.url).match('acme.com'));
    expect(e).toBeInstanceOf(UnexpectedResponseError);
    expect(e).not.toBeInstanceOf(NotServiceApiError);
  });
});

describe('unknown codes fall back on their status class', () => {
  it('402 plan_cap_reached stops for credits; 403 key_suspended is an auth stop with its code', async () => {
    const server = await hostile((req, res) =>
      req.method === 'POST'
        ? json(res, 402, { type: 'x/plan_cap_reached', title: 'Cap', status: 402, code: 'plan_cap_reached', detail: 'monthly cap reached', balance: 40 })
        : json(res, 403, { type: 'x/key_suspended', title: 'Suspended', status: 403, code: 'key_suspended', detail: 'key suspended for abuse' }),
    );
    const c = client(server.url);
    const credits = await failure(c.enrich('acme.com', { idempotencyKey: 'k' }));
    expect(credits).toBeInstanceOf(InsufficientCreditsError);
    expect(credits).toMatchObject({ code: 'plan_cap_reached', balance: 40, required: undefined });
    const auth = await failure(c.match('acme.com'));
    expect(auth).toBeInstanceOf(InsufficientScopeError);
    expect(auth).toMatchObject({ code: 'key_suspended', message: 'key_suspended (HTTP 403): key suspended for abuse' });
  });
});

describe('what a 200 must carry before anything is paid for', () => {
  const matchAnswering = async (company: unknown) => {
    const server = await hostile((_req, res) => json(res, 200, { matched: true, credits_charged: 0, company }));
    return client(server.url).match('acme.com');
  };

  it.each([[''], ['co.uk'], ['https://acme.com/about'], ['10.0.0.1'], ['not a domain'], [null], [42]])(
    'a match whose company.domain is %j is a bad_response',
    async (domain) => {
      const e = await failure(matchAnswering({ domain, name: 'Acme' }));
      expect(e).toMatchObject({ code: 'bad_response' });
      expect(e.message).toMatch(/not a registrable domain/);
    },
  );

  it('a canonical domain in another case, with a root dot, or as an IDN, is read in wire form', async () => {
    expect((await matchAnswering({ domain: 'Acme.COM.', name: 'Acme' })).company?.domain).toBe('acme.com');
    expect((await matchAnswering({ domain: 'münchen.de', name: 'M' })).company?.domain).toBe('xn--mnchen-3ya.de');
  });

  it('an enrich match with an empty domain is a bad_response too', async () => {
    const server = await hostile((_req, res) => json(res, 200, { matched: true, credits_charged: 1, credits_remaining: 9, company: { domain: '', name: 'Acme' } }));
    expect(await failure(client(server.url).enrich('acme.com', { idempotencyKey: 'k' }))).toMatchObject({ code: 'bad_response' });
  });
});

describe('money is counted by the spec, not by the answer', () => {
  const enrichAnswering = async (body: Record<string, unknown>) => {
    const server = await hostile((_req, res) => json(res, 200, body));
    return client(server.url).enrich('acme.com', { idempotencyKey: 'k' });
  };
  const company = { domain: 'acme.com', name: 'Acme', last_updated: '2026-01-01T00:00:00Z' };

  it.each([
    ['missing', undefined, null],
    ['a string', '1', null],
    ['negative', -5, null],
    ['NaN-ish', 'NaN', null],
    ['a different count', 7, 7],
    ['zero', 0, 0],
  ])('credits_charged %s on a match counts 1', async (_what, stated, reported) => {
    const answer = await enrichAnswering({ matched: true, credits_charged: stated, credits_remaining: 9, company });
    expect(answer).toMatchObject({ matched: true, credits_charged: 1, credits_reported: reported, credits_remaining: 9 });
  });

  it.each([[0], [undefined], ['3'], [-1]])('a miss stating credits_charged %j counts 0', async (stated) => {
    const answer = await enrichAnswering({ matched: false, credits_charged: stated, credits_remaining: 9, company: null });
    expect(answer).toMatchObject({ matched: false, credits_charged: 0, company: null });
  });

  it('a miss that says it charged is a bad_response counted at 1 credit, not its own figure', async () => {
    const error = await failure(enrichAnswering({ matched: false, credits_charged: 3, credits_remaining: 9, company: null }));
    expect(error).toMatchObject({ code: 'bad_response', charged: 1 });
    expect(String((error as Error).message)).toContain('says no match but charged 3');
  });

  it.each([[-4], ['100'], [null], [undefined]])('credits_remaining %j is unknown (NaN)', async (remaining) => {
    const answer = await enrichAnswering({ matched: true, credits_charged: 1, credits_remaining: remaining, company });
    expect(answer.credits_remaining).toBeNaN();
  });
});
