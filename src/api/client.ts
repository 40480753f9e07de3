import { Pool, type Dispatcher } from 'undici';
import { apiErrorFromResponse, connectionError, UnexpectedResponseError } from './errors.js';
import { serviceEndpoint } from './endpoint.js';
import type { CompanyRecord, CompanySummary, EnrichResponse, MatchResponse } from './types.js';

export interface ClientOptions {
  /** The service address, with or without the /api/v1/public prefix. */
  baseUrl: string;
  apiKey: string;
  dispatcher: Dispatcher;
  userAgent: string;
  /** Per request: headers and body each must arrive within this. */
  timeoutMs?: number;
}

export interface CallOptions {
  signal?: AbortSignal | undefined;
}

export interface ServiceClient {
  match(domain: string, options?: CallOptions): Promise<MatchResponse>;
  enrich(domain: string, options: CallOptions & { idempotencyKey: string }): Promise<EnrichResponse>;
}

/** A keep-alive pool sized to the concurrency the batch may use. */
export function createDispatcher(baseUrl: string, connections: number): Pool {
  return new Pool(serviceEndpoint(baseUrl).origin, {
    connections,
    pipelining: 1,
    keepAliveTimeout: 30_000,
    keepAliveMaxTimeout: 60_000,
  });
}

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

function asSummary(v: unknown): CompanySummary | null {
  if (!isObject(v) || typeof v['domain'] !== 'string' || typeof v['name'] !== 'string') return null;
  return { domain: v['domain'], name: v['name'] };
}

/** The documented fields only (spec 9.2: new fields may appear and are ignored), nulls kept. */
function asRecord(v: unknown): CompanyRecord | null {
  const summary = asSummary(v);
  if (summary === null || !isObject(v)) return null;
  const str = (k: string): string | null => (typeof v[k] === 'string' ? (v[k] as string) : null);
  const num = (k: string): number | null => (typeof v[k] === 'number' && Number.isFinite(v[k]) ? (v[k] as number) : null);
  const specialties = Array.isArray(v['specialties']) ? v['specialties'].filter((s): s is string => typeof s === 'string') : [];
  return {
    domain: summary.domain,
    name: summary.name,
    website_url: str('website_url'),
    description: str('description'),
    industry: str('industry'),
    employee_count: num('employee_count'),
    revenue_range: str('revenue_range'),
    ownership_type: str('ownership_type'),
    year_founded: num('year_founded'),
    specialties,
    hq_country: str('hq_country'),
    hq_city: str('hq_city'),
    last_updated: str('last_updated') ?? '',
  };
}

function contractError(status: number, what: string, requestId: string | undefined): UnexpectedResponseError {
  return new UnexpectedResponseError({ status, code: 'bad_response', message: `the service answered ${status} with ${what}`, requestId, definitive: false });
}

export function createClient(options: ClientOptions): ServiceClient {
  const { prefix } = serviceEndpoint(options.baseUrl);
  const timeout = options.timeoutMs ?? 30_000;
  const baseHeaders = {
    authorization: `Bearer ${options.apiKey}`,
    accept: 'application/json',
    'user-agent': options.userAgent,
  };

  async function send(
    method: 'GET' | 'POST',
    path: string,
    headers: Record<string, string>,
    body: string | undefined,
    signal: AbortSignal | undefined,
  ): Promise<{ status: number; json: unknown; requestId: string | undefined }> {
    let res: Dispatcher.ResponseData;
    try {
      res = await options.dispatcher.request({ method, path, headers, body: body ?? null, signal: signal ?? null, headersTimeout: timeout, bodyTimeout: timeout });
    } catch (error) {
      throw connectionError(error);
    }
    let text: string;
    try {
      text = await res.body.text();
    } catch (error) {
      throw connectionError(error);
    }
    const header = (name: string): string | undefined => {
      const v = res.headers[name];
      return Array.isArray(v) ? v[0] : v;
    };
    const requestId = header('x-request-id');
    if (res.statusCode < 200 || res.statusCode >= 300) {
      throw apiErrorFromResponse({ status: res.statusCode, contentType: header('content-type') ?? '', retryAfter: header('retry-after'), requestId, body: text });
    }
    try {
      return { status: res.statusCode, json: JSON.parse(text) as unknown, requestId };
    } catch {
      throw contractError(res.statusCode, 'a body that is not JSON', requestId);
    }
  }

  return {
    async match(domain, callOptions = {}) {
      const { status, json, requestId } = await send('GET', `${prefix}/company/match?domain=${encodeURIComponent(domain)}`, baseHeaders, undefined, callOptions.signal);
      if (!isObject(json) || typeof json['matched'] !== 'boolean') throw contractError(status, 'no "matched" field', requestId);
      const company = asSummary(json['company']);
      if (json['matched'] && company === null) throw contractError(status, 'matched: true but no company', requestId);
      return { matched: json['matched'] && company !== null, credits_charged: 0, company: json['matched'] ? company : null };
    },

    async enrich(domain, callOptions) {
      const headers = { ...baseHeaders, 'content-type': 'application/json', 'idempotency-key': callOptions.idempotencyKey };
      const { status, json, requestId } = await send('POST', `${prefix}/company/enrich`, headers, JSON.stringify({ domain }), callOptions.signal);
      if (!isObject(json) || typeof json['matched'] !== 'boolean') throw contractError(status, 'no "matched" field', requestId);
      const company = json['matched'] ? asRecord(json['company']) : null;
      if (json['matched'] && company === null) throw contractError(status, 'matched: true but no usable company', requestId);
      const charged = typeof json['credits_charged'] === 'number' ? json['credits_charged'] : 0;
      const remaining = typeof json['credits_remaining'] === 'number' ? json['credits_remaining'] : Number.NaN;
      return { matched: company !== null, credits_charged: charged, credits_remaining: remaining, company };
    },
  };
}
