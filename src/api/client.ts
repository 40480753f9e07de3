import { performance } from 'node:perf_hooks';
import { Pool, type Dispatcher } from 'undici';
import { apiErrorFromResponse, connectionError, NotServiceApiError, UnexpectedResponseError } from './errors.js';
import { serviceEndpoint } from './endpoint.js';
import { DeadlineExceeded } from './network.js';
import { asRecord, asSummary, ENRICH_PRICE, isObject, statedCredits } from './response.js';
import type { EnrichResponse, MatchResponse } from './types.js';

export interface ClientOptions {
  /** The service address, with or without the /api/v1/public prefix. */
  baseUrl: string;
  apiKey: string;
  dispatcher: Dispatcher;
  userAgent: string;
  /** Idle limits: the headers, and each stretch of the body, must arrive within this. Default 30 s. */
  timeoutMs?: number;
  /** The whole request, headers and all of the body, within this: a body dripped a byte at a time ends. Default 60 s. */
  deadlineMs?: number;
  /** The most bytes of an answer read (default 1 MiB, far above any real one); beyond it: bad_response. */
  maxResponseBytes?: number;
}

export interface CallOptions {
  signal?: AbortSignal | undefined;
}

export interface ServiceClient {
  match(domain: string, options?: CallOptions): Promise<MatchResponse>;
  enrich(domain: string, options: CallOptions & { idempotencyKey: string }): Promise<EnrichResponse>;
}

export const DEFAULT_TIMEOUT_MS = 30_000;
export const DEFAULT_DEADLINE_MS = 60_000;
export const DEFAULT_MAX_RESPONSE_BYTES = 1024 * 1024;

/** A keep-alive pool sized to the concurrency the batch may use. */
export function createDispatcher(baseUrl: string, connections: number): Pool {
  return new Pool(serviceEndpoint(baseUrl).origin, {
    connections,
    pipelining: 1,
    keepAliveTimeout: 30_000,
    keepAliveMaxTimeout: 60_000,
  });
}

function contractError(status: number, what: string, requestId: string | undefined): UnexpectedResponseError {
  return new UnexpectedResponseError({ status, code: 'bad_response', message: `the service answered ${status} with ${what}`, requestId, definitive: false });
}

/** The caller gave up (Ctrl-C, a stopped run): told apart from our deadline when classified. */
class CallerAborted extends Error {
  override readonly name = 'AbortError';
}

/**
 * The body as text, or null once it passes `limit` bytes (the rest is never read). Events rather
 * than an async iterator: this runs for every answer, tens of thousands a second.
 */
function readBounded(res: Dispatcher.ResponseData, limit: number): Promise<string | null> {
  const declared = Number(res.headers['content-length']);
  if (Number.isFinite(declared) && declared > limit) {
    res.body.destroy();
    return Promise.resolve(null);
  }
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    res.body.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size <= limit) chunks.push(chunk);
      else {
        resolve(null);
        res.body.destroy();
      }
    });
    res.body.on('end', () => resolve(Buffer.concat(chunks, size).toString('utf8')));
    res.body.on('error', reject);
  });
}

/**
 * Reads the body before the whole-request deadline. The headers are already bounded by undici's
 * headersTimeout (total, not idle), so one timer for the rest of the time is enough; a body
 * dripped a byte at a time, never idle, ends here.
 */
async function readBefore(res: Dispatcher.ResponseData, limit: number, deadlineMs: number, startedAt: number): Promise<string | null> {
  const remaining = deadlineMs - (performance.now() - startedAt);
  const timer = setTimeout(() => res.body.destroy(new DeadlineExceeded(deadlineMs)), Math.max(0, remaining));
  try {
    return await readBounded(res, limit);
  } finally {
    clearTimeout(timer);
  }
}

const headerOf = (res: Dispatcher.ResponseData, name: string): string | undefined => {
  const v = res.headers[name];
  return Array.isArray(v) ? v[0] : v;
};

interface Reply {
  status: number;
  json: unknown;
  requestId: string | undefined;
}

export function createClient(options: ClientOptions): ServiceClient {
  const { origin, prefix } = serviceEndpoint(options.baseUrl);
  const host = new URL(origin).host;
  const timeout = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const deadlineMs = options.deadlineMs ?? DEFAULT_DEADLINE_MS;
  const limit = options.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES;
  // Headers come within both limits: undici's headersTimeout counts from the request, not idly.
  const headersTimeout = Math.min(timeout, deadlineMs);
  const baseHeaders = {
    authorization: `Bearer ${options.apiKey}`,
    accept: 'application/json',
    'user-agent': options.userAgent,
  };

  /** One exchange within the deadline: the status, the bounded body. */
  async function exchange(method: 'GET' | 'POST', path: string, headers: Record<string, string>, body: string | undefined, caller: AbortSignal | undefined) {
    const startedAt = performance.now();
    try {
      const res = await options.dispatcher.request({ method, path, headers, body: body ?? null, signal: caller ?? null, headersTimeout, bodyTimeout: timeout });
      return { res, text: await readBefore(res, limit, deadlineMs, startedAt) };
    } catch (error) {
      throw connectionError(caller?.aborted === true ? new CallerAborted('aborted', { cause: error }) : error, host);
    }
  }

  async function send(method: 'GET' | 'POST', path: string, headers: Record<string, string>, body: string | undefined, signal: AbortSignal | undefined): Promise<Reply> {
    const { res, text } = await exchange(method, path, headers, body, signal);
    const requestId = headerOf(res, 'x-request-id');
    if (text === null) throw contractError(res.statusCode, `an answer over ${limit} bytes (not read)`, requestId);
    if (res.statusCode < 200 || res.statusCode >= 300) {
      throw apiErrorFromResponse({ status: res.statusCode, contentType: headerOf(res, 'content-type') ?? '', retryAfter: headerOf(res, 'retry-after'), requestId, body: text });
    }
    try {
      return { status: res.statusCode, json: JSON.parse(text) as unknown, requestId };
    } catch {
      throw notJson(res.statusCode, headerOf(res, 'content-type') ?? '', requestId);
    }
  }

  return {
    async match(domain, callOptions = {}) {
      const { status, json, requestId } = await send('GET', `${prefix}/company/match?domain=${encodeURIComponent(domain)}`, baseHeaders, undefined, callOptions.signal);
      if (!isObject(json) || typeof json['matched'] !== 'boolean') throw contractError(status, 'no "matched" field', requestId);
      if (!json['matched']) return { matched: false, credits_charged: 0, company: null };
      const company = asSummary(json['company'], domain);
      if (!company.ok) throw contractError(status, company.why, requestId);
      return { matched: true, credits_charged: 0, company: company.value };
    },

    async enrich(domain, callOptions) {
      const headers = { ...baseHeaders, 'content-type': 'application/json', 'idempotency-key': callOptions.idempotencyKey };
      const { status, json, requestId } = await send('POST', `${prefix}/company/enrich`, headers, JSON.stringify({ domain }), callOptions.signal);
      if (!isObject(json) || typeof json['matched'] !== 'boolean') throw contractError(status, 'no "matched" field', requestId);
      const remaining = statedCredits(json['credits_remaining']) ?? Number.NaN;
      const reported = statedCredits(json['credits_charged']);
      if (!json['matched']) return { matched: false, credits_charged: ENRICH_PRICE.miss, credits_reported: reported, credits_remaining: remaining, company: null };
      const company = asRecord(json['company'], domain);
      if (!company.ok) throw contractError(status, company.why, requestId);
      return { matched: true, credits_charged: ENRICH_PRICE.match, credits_reported: reported, credits_remaining: remaining, company: company.value };
    },
  };
}

/** A 2xx that is not JSON: an HTML page is some other site (a wrong path, a portal), anything else a broken answer. */
function notJson(status: number, contentType: string, requestId: string | undefined): UnexpectedResponseError {
  if (!/^text\/html\b/i.test(contentType)) return contractError(status, 'a body that is not JSON', requestId);
  return new NotServiceApiError({
    status,
    code: 'not_service_api',
    message: `this address does not answer as the service API (HTTP ${status} with an HTML page); check the base URL`,
    requestId,
    definitive: false,
  });
}
