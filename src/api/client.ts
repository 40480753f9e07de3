import { createRequire } from 'node:module';
import type { Dispatcher, Pool } from 'undici';
import { apiErrorFromResponse, connectionError, NotServiceApiError, UnexpectedResponseError, UnusablePaidAnswerError } from './errors.js';
import { serviceEndpoint } from './endpoint.js';
import { CallerAborted, exchange, type Answer, type ExchangeLimits } from './exchange.js';
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
  /** An enrich the paid endpoint cannot bill (no domain: 422 by spec 4.2; no error charges, spec 7), to learn it answers now (the settle rule). Rejects with its error. */
  probeEnrich?(options?: CallOptions): Promise<void>;
}

export const DEFAULT_TIMEOUT_MS = 30_000;
export const DEFAULT_DEADLINE_MS = 60_000;
export const DEFAULT_MAX_RESPONSE_BYTES = 1024 * 1024;

/** A keep-alive pool sized to the concurrency the batch may use. */
export function createDispatcher(baseUrl: string, connections: number): Pool {
  // Loaded here, not at start: nothing before the first call needs the network.
  const undici = createRequire(import.meta.url)('undici') as { Pool: typeof Pool };
  return new undici.Pool(serviceEndpoint(baseUrl).origin, {
    connections,
    pipelining: 1,
    keepAliveTimeout: 30_000,
    keepAliveMaxTimeout: 60_000,
  });
}

function contractError(status: number, what: string, requestId: string | undefined): UnexpectedResponseError {
  return new UnexpectedResponseError({ status, code: 'bad_response', message: `the service answered ${status} with ${what}`, requestId, definitive: false });
}

const headerOf = (headers: Answer['headers'], name: string): string | undefined => {
  const v = headers[name];
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

  const limits: ExchangeLimits = { deadlineMs, maxBytes: limit };
  /** A paid call's headers, in one literal (a spread of baseHeaders and two more fields costs V8 far more). */
  const paidHeaders = (idempotencyKey: string): Record<string, string> => ({
    authorization: baseHeaders.authorization,
    accept: baseHeaders.accept,
    'user-agent': baseHeaders['user-agent'],
    'content-type': 'application/json',
    'idempotency-key': idempotencyKey,
  });

  async function send(method: 'GET' | 'POST', path: string, headers: Record<string, string>, body: string | undefined, signal: AbortSignal | undefined): Promise<Reply> {
    let answer: Answer;
    try {
      answer = await exchange(options.dispatcher, { method, path, headers, body: body ?? null, headersTimeout, bodyTimeout: timeout }, limits, signal);
    } catch (error) {
      throw connectionError(signal?.aborted === true && !(error instanceof CallerAborted) ? new CallerAborted('aborted', { cause: error }) : error, host);
    }
    const { status, headers: got, text } = answer;
    const requestId = headerOf(got, 'x-request-id');
    if (text === null) throw contractError(status, `an answer over ${limit} bytes (not read)`, requestId);
    if (status < 200 || status >= 300) {
      throw apiErrorFromResponse({ status, contentType: headerOf(got, 'content-type') ?? '', retryAfter: headerOf(got, 'retry-after'), requestId, body: text });
    }
    try {
      return { status, json: JSON.parse(text) as unknown, requestId };
    } catch {
      throw notJson(status, headerOf(got, 'content-type') ?? '', requestId);
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

    async probeEnrich(callOptions = {}) {
      // A key of its own, never used again: the probe passes the same layers a keyed call does.
      const key = `probe-${Buffer.from(globalThis.crypto.getRandomValues(new Uint8Array(12))).toString('hex')}`;
      await send('POST', `${prefix}/company/enrich`, paidHeaders(key), '{}', callOptions.signal);
    },
    async enrich(domain, callOptions) {
      const { status, json, requestId } = await send('POST', `${prefix}/company/enrich`, paidHeaders(callOptions.idempotencyKey), JSON.stringify({ domain }), callOptions.signal);
      if (!isObject(json) || typeof json['matched'] !== 'boolean') throw contractError(status, 'no "matched" field', requestId);
      const remaining = statedCredits(json['credits_remaining']) ?? Number.NaN;
      const reported = statedCredits(json['credits_charged']);
      const unusable = (why: string, charged: number): UnusablePaidAnswerError =>
        new UnusablePaidAnswerError({ message: `the service's paid answer for ${domain} ${why}`, requestId, charged });
      if (!json['matched']) {
        // A miss is free (spec 2.2); one that says it charged contradicts itself. It may have
        // charged, at most what an enrich costs (spec 8.4): counted so, never at its own figure.
        if (reported !== null && reported > 0) throw unusable(`says no match but charged ${reported}`, ENRICH_PRICE.match);
        return { matched: false, credits_charged: ENRICH_PRICE.miss, credits_reported: reported, credits_remaining: remaining, company: null };
      }
      const company = asRecord(json['company'], domain);
      if (!company.ok) throw unusable(`is unusable (${company.why})`, ENRICH_PRICE.match);
      if (company.value.domain !== domain) throw unusable(`is the record of another company (${company.value.domain})`, ENRICH_PRICE.match);
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
