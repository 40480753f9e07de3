import type { IncomingMessage, ServerResponse } from 'node:http';
import { API_PREFIX } from '../api/types.js';
import { normaliseDomain } from '../pipeline/normalise.js';
import { SCOPE, type Account, type Accounts, type StoredResponse } from './accounts.js';
import { toRecord, type CompanyDirectory } from './directory.js';
import { problem, type ProblemResponse } from './problem.js';

/**
 * What an Idempotency-Key stores. `spec` (the default) reads spec 7 literally: a 402 ("top up,
 * then replay") and a 500 ("nothing charged; retry") store nothing, so the next attempt under the
 * key executes afresh; only a 200 is kept. `stripe` keeps the first outcome of every request that
 * executed, errors included, and replays it for as long as the key lives, as Stripe does.
 */
export type IdempotencyMode = 'spec' | 'stripe';

/** Which request id a replay carries: the executed call's, the replay's own, or none at all. */
export type ReplayRequestId = 'original' | 'fresh' | 'none';

export interface HandlerConfig {
  directory: CompanyDirectory;
  accounts: Accounts;
  /** Share of company calls answered 500 (after auth and rate limiting), drawn from `random`. */
  failRate: number;
  /** Delay before each company-endpoint answer, drawn per answer (ms); an enrich is charged before it. */
  latency: () => number;
  /**
   * Share of company-endpoint answers lost after the call executed (and, for an enrich, was
   * charged): the connection is reset instead. What a network failure looks like to a client.
   */
  dropRate: number;
  random: () => number;
  /** Monotonic milliseconds, for the rate gates. */
  now: () => number;
  typeBase: string;
  idempotency: IdempotencyMode;
  replayRequestId: ReplayRequestId;
  openapi: () => string;
  stats: SandboxStats;
}

export interface SandboxStats {
  requests: number;
  byStatus: Record<number, number>;
  replays: number;
  /** Answers lost on purpose (dropRate). */
  dropped: number;
  /** Wall-clock ms of the first and the latest company-endpoint request (0: none yet). */
  firstAt: number;
  lastAt: number;
  /** Calls that passed auth, rate limit and validation, per endpoint and normalised domain. */
  matchCalls: Map<string, number>;
  enrichCalls: Map<string, number>;
}

const bump = (counts: Map<string, number>, key: string): void => {
  counts.set(key, (counts.get(key) ?? 0) + 1);
};

const MATCH = `${API_PREFIX}/company/match`;
const ENRICH = `${API_PREFIX}/company/enrich`;
const OPENAPI = `${API_PREFIX}/openapi.json`;
const PLANNED = new Set([`${API_PREFIX}/search`, `${API_PREFIX}/person/enrich`]);
const JSON_TYPE = 'application/json';
const PROBLEM_TYPE = 'application/problem+json';
const MAX_BODY = 16 * 1024;

interface Answer {
  status: number;
  contentType: string;
  body: string;
  headers?: Record<string, string> | undefined;
  delay?: boolean;
  /** The x-request-id to send: unset for this request's own, null for none. */
  requestId?: string | null;
}

const asAnswer = (p: ProblemResponse, delay = false): Answer => ({ status: p.status, contentType: PROBLEM_TYPE, body: p.body, headers: p.headers, delay });

/**
 * The service's rules for the callable endpoints, in the order a request meets them:
 * route -> auth (401/403) -> rate limit (429) -> validation (422) -> idempotent replay -> injected
 * fault (500) -> credits (402) -> charge and answer. Errors never charge (spec 7 rule 2).
 */
export function createHandler(config: HandlerConfig): (req: IncomingMessage, res: ServerResponse) => void {
  let seq = 0;
  const { accounts, directory, typeBase, stats } = config;

  const send = (res: ServerResponse, requestId: string, a: Answer): void => {
    const dropped = a.delay === true && config.dropRate > 0 && config.random() < config.dropRate;
    if (dropped) stats.dropped++;
    else stats.byStatus[a.status] = (stats.byStatus[a.status] ?? 0) + 1;
    const write = (): void => {
      if (res.destroyed) return;
      if (dropped) {
        res.socket?.destroy();
        return;
      }
      const id = a.requestId === undefined ? requestId : a.requestId;
      res.writeHead(a.status, { 'content-type': a.contentType, ...(id === null ? {} : { 'x-request-id': id }), ...a.headers });
      res.end(a.body);
    };
    const delay = a.delay === true ? config.latency() : 0;
    if (delay > 0) setTimeout(write, delay);
    else write();
  };

  const fail = (status: number, code: string, requestId: string, detail?: string, extra?: Record<string, number | string>): Answer =>
    asAnswer(problem(typeBase, status, code, requestId, detail, extra), status !== 401 && status !== 403 && status !== 429);

  /** Auth then the key's token bucket; undefined means the request may proceed. */
  const admit = (req: IncomingMessage, requestId: string): { account: Account } | { answer: Answer } => {
    stats.lastAt = Date.now();
    if (stats.firstAt === 0) stats.firstAt = stats.lastAt;
    const account = accounts.authenticate(req.headers.authorization);
    if (account === undefined) return { answer: fail(401, 'invalid_token', requestId) };
    if (!account.scopes.has(SCOPE)) return { answer: fail(403, 'insufficient_scope', requestId, `this endpoint needs the scope ${SCOPE}`) };
    if (account.gate !== null) {
      const taken = account.gate.take(config.now());
      if (!taken.ok) {
        const p = problem(typeBase, 429, 'rate_limited', requestId, `retry after ${taken.retryAfterSeconds}s`, { retryAfterSeconds: taken.retryAfterSeconds });
        return { answer: { ...asAnswer(p), headers: { 'retry-after': String(taken.retryAfterSeconds) } } };
      }
    }
    return { account };
  };

  const faulted = (): boolean => config.failRate > 0 && config.random() < config.failRate;

  const match = (req: IncomingMessage, query: string, requestId: string): Answer => {
    const admitted = admit(req, requestId);
    if ('answer' in admitted) return admitted.answer;
    const raw = new URLSearchParams(query).get('domain');
    if (raw === null || raw.trim() === '') return fail(422, 'validation_error', requestId, 'the query parameter domain is required');
    const normalised = normaliseDomain(raw);
    if (!normalised.ok) return fail(422, 'validation_error', requestId, `domain is not a registrable domain (${normalised.reason})`);
    bump(stats.matchCalls, normalised.domain);
    if (faulted()) return fail(500, 'internal', requestId, 'injected fault');
    const company = directory.lookup(normalised.domain);
    const body = company === undefined
      ? '{"matched":false,"credits_charged":0,"company":null}'
      : JSON.stringify({ matched: true, credits_charged: 0, company: { domain: company.domain, name: company.name } });
    return { status: 200, contentType: JSON_TYPE, body, delay: true };
  };

  const enrich = (req: IncomingMessage, rawBody: string, requestId: string): Answer => {
    const admitted = admit(req, requestId);
    if ('answer' in admitted) return admitted.answer;
    const { account } = admitted;

    let parsed: unknown;
    try {
      parsed = JSON.parse(rawBody);
    } catch {
      return fail(422, 'validation_error', requestId, 'the body must be a JSON object');
    }
    const domainValue = parsed !== null && typeof parsed === 'object' ? (parsed as { domain?: unknown }).domain : undefined;
    if (typeof domainValue !== 'string' || domainValue.trim() === '') return fail(422, 'validation_error', requestId, 'the body field domain is required');
    const normalised = normaliseDomain(domainValue);
    if (!normalised.ok) return fail(422, 'validation_error', requestId, `domain is not a registrable domain (${normalised.reason})`);

    bump(stats.enrichCalls, normalised.domain);
    const header = req.headers['idempotency-key'];
    const idempotencyKey = typeof header === 'string' ? header : null;
    if (idempotencyKey !== null && (idempotencyKey.length === 0 || idempotencyKey.length > 255)) {
      return fail(422, 'validation_error', requestId, 'Idempotency-Key must be 1 to 255 characters');
    }
    const fingerprint = canonicalJson(parsed);
    if (idempotencyKey !== null) {
      const stored = account.idempotency.get(idempotencyKey);
      if (stored !== undefined) {
        if (stored.fingerprint !== fingerprint) {
          return fail(422, 'validation_error', requestId, 'this Idempotency-Key was already used with a different request body');
        }
        stats.replays++;
        return replay(stored, requestId);
      }
    }

    // From here on the request has executed. What its key keeps depends on the mode (see
    // IdempotencyMode): a 200 always, errors only in `stripe` mode.
    const answer = execute(account, normalised.domain, idempotencyKey, requestId);
    if (idempotencyKey !== null && (answer.status === 200 || config.idempotency === 'stripe')) {
      const store: StoredResponse = { fingerprint, status: answer.status, contentType: answer.contentType, body: answer.body, requestId };
      account.idempotency.set(idempotencyKey, store);
    }
    return answer;
  };

  /** A stored answer sent again, carrying the request id `replayRequestId` asks for. */
  const replay = (stored: StoredResponse, requestId: string): Answer => {
    const mode = config.replayRequestId;
    const id = mode === 'original' ? stored.requestId : mode === 'fresh' ? requestId : null;
    const body = stored.contentType === PROBLEM_TYPE && mode !== 'original' ? withRequestId(stored.body, id) : stored.body;
    return { status: stored.status, contentType: stored.contentType, body, headers: { 'idempotent-replayed': 'true' }, requestId: id, delay: true };
  };

  const execute = (account: Account, domain: string, idempotencyKey: string | null, requestId: string): Answer => {
    if (faulted()) return fail(500, 'internal', requestId, 'injected fault');
    const company = directory.lookup(domain);
    if (company === undefined) {
      return { status: 200, contentType: JSON_TYPE, body: JSON.stringify({ matched: false, credits_charged: 0, credits_remaining: account.balance, company: null }), delay: true };
    }
    if (account.balance < 1) {
      return fail(402, 'insufficient_credits', requestId, `balance ${account.balance}, this call needs 1`, { balance: account.balance, required: 1 });
    }
    accounts.charge(account, company.domain, idempotencyKey, requestId, new Date());
    const body = JSON.stringify({ matched: true, credits_charged: 1, credits_remaining: account.balance, company: toRecord(company) });
    return { status: 200, contentType: JSON_TYPE, body, delay: true };
  };

  const admin = (req: IncomingMessage, path: string, rawBody: string, requestId: string): Answer => {
    const account = accounts.authenticate(req.headers.authorization);
    if (account === undefined) return fail(401, 'invalid_token', requestId);
    if (path === '/_sandbox/ledger' && req.method === 'GET') {
      const charged = account.ledger.reduce((n, e) => n + e.credits, 0);
      return { status: 200, contentType: JSON_TYPE, body: JSON.stringify({ balance: account.balance, charged, entries: account.ledger }) };
    }
    if (path === '/_sandbox/stats' && req.method === 'GET') {
      const { matchCalls, enrichCalls, ...counters } = stats;
      return { status: 200, contentType: JSON_TYPE, body: JSON.stringify({ ...counters, matchDomains: matchCalls.size, enrichDomains: enrichCalls.size }) };
    }
    if (path === '/_sandbox/topup' && req.method === 'POST') {
      let credits: unknown;
      try {
        credits = (JSON.parse(rawBody) as { credits?: unknown }).credits;
      } catch {
        credits = undefined;
      }
      if (typeof credits !== 'number' || !Number.isInteger(credits) || credits <= 0) {
        return fail(422, 'validation_error', requestId, 'credits must be a positive integer');
      }
      account.balance += credits;
      return { status: 200, contentType: JSON_TYPE, body: JSON.stringify({ balance: account.balance }) };
    }
    return fail(404, 'not_found', requestId, `no sandbox route ${req.method ?? ''} ${path}`);
  };

  const route = (req: IncomingMessage, path: string, query: string, body: string, requestId: string): Answer => {
    const method = req.method ?? 'GET';
    if (path === MATCH) return method === 'GET' ? match(req, query, requestId) : notAllowed('GET', method, requestId);
    if (path === ENRICH) return method === 'POST' ? enrich(req, body, requestId) : notAllowed('POST', method, requestId);
    if (path === OPENAPI && method === 'GET') return { status: 200, contentType: JSON_TYPE, body: config.openapi() };
    if (PLANNED.has(path)) return fail(501, 'not_callable', requestId, `${path.slice(API_PREFIX.length)} is documented as planned and does not answer yet`);
    if (path.startsWith('/_sandbox/')) return admin(req, path, body, requestId);
    return fail(404, 'not_found', requestId, `no endpoint ${method} ${path}`);
  };

  const notAllowed = (allow: string, method: string, requestId: string): Answer => {
    const p = problem(typeBase, 405, 'method_not_allowed', requestId, `${method} is not allowed here; use ${allow}`);
    return { ...asAnswer(p), headers: { allow } };
  };

  return (req, res) => {
    stats.requests++;
    const requestId = `req_${(++seq).toString(36).padStart(7, '0')}`;
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q === -1 ? url : url.slice(0, q);
    const query = q === -1 ? '' : url.slice(q + 1);

    if (req.method === 'GET' || req.method === 'HEAD') {
      req.resume();
      send(res, requestId, route(req, path, query, '', requestId));
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    let tooLarge = false;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_BODY) tooLarge = true;
      else chunks.push(chunk);
    });
    req.on('end', () => {
      const answer = tooLarge
        ? fail(422, 'validation_error', requestId, `the body exceeds ${MAX_BODY} bytes`)
        : route(req, path, query, Buffer.concat(chunks).toString('utf8'), requestId);
      send(res, requestId, answer);
    });
  };
}

/** A stored problem document with its requestId replaced, or removed for null. */
function withRequestId(body: string, requestId: string | null): string {
  const doc = JSON.parse(body) as Record<string, unknown>;
  if (requestId === null) delete doc['requestId'];
  else doc['requestId'] = requestId;
  return JSON.stringify(doc);
}

/** JSON with sorted keys, so `{"a":1,"b":2}` and `{"b":2, "a":1}` count as the same body. */
function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const entries = Object.keys(value as object)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${canonicalJson((value as Record<string, unknown>)[k])}`);
  return `{${entries.join(',')}}`;
}
