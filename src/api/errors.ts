import { classifyConnectionFailure, type ConnectionFailure } from './network.js';

export type { ConnectionFailure } from './network.js';

/**
 * Every error the service client throws, built by one factory from the response (RFC 9457, spec 7); messages never carry request headers,
 * so the API key cannot leak. `definitive` is what the money rules hinge on: the service itself answered with a problem document, which by
 * spec 7 rule 2 charged nothing; anything else (a reset, a timeout, a proxy's 502) leaves the outcome unknown, so a paid retry reuses its key.
 */
export interface Problem {
  type?: string;
  title?: string;
  status?: number;
  code?: string;
  detail?: string;
  requestId?: string;
  retryAfterSeconds?: number;
  balance?: number;
  required?: number;
  [extra: string]: unknown;
}

export interface ApiErrorInit {
  status: number;
  code: string;
  message: string;
  requestId?: string | undefined;
  problem?: Problem | undefined;
  definitive: boolean;
  cause?: unknown;
}

export class ApiError extends Error {
  override readonly name: string = 'ApiError';
  readonly status: number;
  readonly code: string;
  readonly requestId: string | undefined;
  readonly problem: Problem | undefined;
  readonly definitive: boolean;

  constructor(init: ApiErrorInit) {
    super(init.message, init.cause === undefined ? undefined : { cause: init.cause });
    this.status = init.status;
    this.code = init.code;
    this.requestId = init.requestId;
    this.problem = init.problem;
    this.definitive = init.definitive;
  }
}

const credits = (v: unknown): number | undefined => (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? v : undefined);

/**
 * A 200 to a paid call that contradicts itself or is another company's record. Never retried (the key would replay it), never stored as
 * the company's record, its credit counted as spent. `charged`: what it cost by the spec (1 on a match) or by its own word.
 */
export class UnusablePaidAnswerError extends ApiError {
  override readonly name = 'UnusablePaidAnswerError';
  readonly charged: number;
  constructor(init: { message: string; requestId: string | undefined; charged: number }) {
    super({ status: 200, code: 'bad_response', message: init.message, requestId: init.requestId, definitive: true });
    this.charged = init.charged;
  }
}

export class InvalidTokenError extends ApiError {
  override readonly name = 'InvalidTokenError';
}
export class InsufficientScopeError extends ApiError {
  override readonly name = 'InsufficientScopeError';
}
export class ValidationError extends ApiError {
  override readonly name = 'ValidationError';
}
export class InternalServerError extends ApiError {
  override readonly name = 'InternalServerError';
}

export class InsufficientCreditsError extends ApiError {
  override readonly name = 'InsufficientCreditsError';
  /** The problem's `balance`, if it is a count at all (a string or -3 is nobody's balance). */
  get balance(): number | undefined {
    return credits(this.problem?.balance);
  }
  get required(): number | undefined {
    return credits(this.problem?.required);
  }
}

export class RateLimitedError extends ApiError {
  override readonly name = 'RateLimitedError';
  constructor(
    init: ApiErrorInit,
    /** From the problem's retryAfterSeconds or the Retry-After header; at least 1 by spec 7. */
    readonly retryAfterSeconds: number,
  ) {
    super(init);
  }
}

export interface ConnectionErrorInit extends ApiErrorInit {
  host: string;
  failure: ConnectionFailure;
  /** A few words a person can act on: "DNS lookup failed", "connection refused". */
  causeText: string;
}

/** No usable answer arrived. `neverSent`: the failure came before a connection existed (DNS, refused, TLS), so the service cannot have run it. */
export class ConnectionError extends ApiError {
  override readonly name: string = 'ConnectionError';
  readonly host: string;
  readonly failure: ConnectionFailure;
  readonly causeText: string;
  constructor(init: ConnectionErrorInit) {
    super(init);
    this.host = init.host;
    this.failure = init.failure;
    this.causeText = init.causeText;
  }
  get neverSent(): boolean {
    return this.failure === 'dns' || this.failure === 'refused' || this.failure === 'unreachable' || this.failure === 'tls';
  }
}

/** A response that is not the service's contract (a proxy's 502 page, a 200 with a broken body). */
export class UnexpectedResponseError extends ApiError {
  override readonly name: string = 'UnexpectedResponseError';
}

/** The address answers, but not as the service: a 404/405 on a documented endpoint (a miss is never a 404, spec 1) or a non-JSON 2xx page; every call would get the same. */
export class NotServiceApiError extends UnexpectedResponseError {
  override readonly name = 'NotServiceApiError';
}

function parseRetryAfter(header: string | undefined, problem: Problem | undefined): number {
  const fromBody = problem?.retryAfterSeconds;
  if (typeof fromBody === 'number' && Number.isFinite(fromBody) && fromBody >= 0) return Math.max(1, Math.ceil(fromBody));
  if (header !== undefined) {
    const seconds = Number(header);
    if (Number.isFinite(seconds) && seconds >= 0) return Math.max(1, Math.ceil(seconds));
    const date = Date.parse(header);
    if (!Number.isNaN(date)) return Math.max(1, Math.ceil((date - Date.now()) / 1000));
  }
  return 1;
}

function parseProblem(contentType: string, body: string): Problem | undefined {
  if (!/^application\/(problem\+)?json\b/i.test(contentType)) return undefined;
  try {
    const parsed: unknown = JSON.parse(body);
    if (parsed !== null && typeof parsed === 'object' && typeof (parsed as Problem).code === 'string') return parsed as Problem;
  } catch {
    // fall through: not a problem document
  }
  return undefined;
}

const CODE_CLASSES: Record<string, typeof ApiError> = {
  invalid_token: InvalidTokenError,
  insufficient_scope: InsufficientScopeError,
  insufficient_credits: InsufficientCreditsError,
  validation_error: ValidationError,
  internal: InternalServerError,
};

/** Unknown codes fall back on the status class (spec 7), so a new code never breaks the client. */
const STATUS_CLASSES: Record<number, typeof ApiError> = {
  401: InvalidTokenError,
  402: InsufficientCreditsError,
  403: InsufficientScopeError,
  422: ValidationError,
};

/** The service's prose as it may be shown on a terminal: no control characters (an ESC in a `detail` would drive it), at most 300 characters. */
export function printable(text: unknown): string {
  if (typeof text !== 'string') return '';
  // eslint-disable-next-line no-control-regex
  const clean = text.replace(/[\x00-\x1f\x7f-\x9f]+/g, ' ').trim();
  return clean.length > 300 ? `${clean.slice(0, 300)}...` : clean;
}

export interface ErrorResponse {
  status: number;
  contentType: string;
  retryAfter: string | undefined;
  requestId: string | undefined;
  body: string;
}

/** Definitive: a problem document with a 4xx or 500, so by spec 7 rule 2 nothing was charged. A 502-504, even with JSON, may come from a gateway in front of a service that ran the call. */
const isDefinitive = (status: number, contentType: string): boolean =>
  /^application\/problem\+json\b/i.test(contentType) && (status < 500 || status === 500);

/**
 * 409 to a paid call: an idempotency layer saying a request under the same key is still running. Under a key whose earlier attempt lost its
 * answer, that attempt may yet be charged: the key is kept (pipeline/run-purchase.ts). Under a key never lost it is an error as any other.
 */
export const IN_PROGRESS = 409;

export function apiErrorFromResponse(res: ErrorResponse): ApiError {
  const problem = parseProblem(res.contentType, res.body);
  const requestId = problem?.requestId ?? res.requestId;
  if (res.status === 429) {
    // A 429 is a refusal to run the call, whoever sent it (the service or a gateway): retry later.
    const code = problem?.code ?? 'rate_limited';
    const detail = printable(problem?.detail ?? problem?.title);
    return new RateLimitedError(
      { status: 429, code, message: `${printable(code)} (HTTP 429)${detail === '' ? '' : `: ${detail}`}`, requestId, problem, definitive: true },
      parseRetryAfter(res.retryAfter, problem),
    );
  }
  if (res.status === 404 || res.status === 405) return notServiceApi(res, problem, requestId);
  if (problem === undefined) {
    return new UnexpectedResponseError({
      status: res.status,
      code: `http_${res.status}`,
      message: `unexpected HTTP ${res.status} response that is not a problem document`,
      requestId,
      definitive: false,
    });
  }
  const code = problem.code as string;
  const detail = printable(problem.detail ?? problem.title);
  const init: ApiErrorInit = {
    status: res.status,
    code,
    message: `${printable(code)} (HTTP ${res.status})${detail === '' ? '' : `: ${detail}`}`,
    requestId,
    problem,
    definitive: isDefinitive(res.status, res.contentType),
  };
  const Class = CODE_CLASSES[code] ?? STATUS_CLASSES[res.status] ?? (res.status >= 500 ? InternalServerError : ApiError);
  return new Class(init);
}

/** A 404 or 405 on a documented endpoint: whatever answered, it is not the service's API. */
function notServiceApi(res: ErrorResponse, problem: Problem | undefined, requestId: string | undefined): NotServiceApiError {
  const what = problem === undefined ? `HTTP ${res.status} (${res.contentType === '' ? 'no content type' : res.contentType.split(';')[0]})` : `HTTP ${res.status} ${problem.code ?? ''}`.trim();
  return new NotServiceApiError({
    status: res.status,
    code: 'not_service_api',
    message: `this address does not answer as the service API (${what} on a documented endpoint); check the base URL`,
    requestId,
    problem,
    definitive: isDefinitive(res.status, res.contentType),
  });
}

/** A transport failure as one line naming the host and cause; the host comes from the configured address, never the request, so neither key nor query leaks. */
export function connectionError(cause: unknown, host = 'the service'): ConnectionError {
  const { failure, text } = classifyConnectionFailure(cause);
  const lead = failure === 'dns' || failure === 'refused' || failure === 'unreachable' || failure === 'tls' ? 'cannot reach' : 'no answer from';
  return new ConnectionError({ status: 0, code: 'network_error', message: `${lead} ${host}: ${text}`, definitive: false, cause, host, failure, causeText: text });
}
