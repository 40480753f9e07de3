import type { IncomingMessage } from 'node:http';
import { SCOPE, type Account, type Accounts } from './accounts.js';
import type { CompanyDirectory } from './directory.js';
import { problem, type ProblemResponse } from './problem.js';

/**
 * What an Idempotency-Key stores. `spec` reads spec 7 literally: a 402 or 500 stores nothing, so the next attempt executes afresh; only a
 * 200 is kept. `stripe` keeps and replays the first outcome of every executed request, errors included, as Stripe does.
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
  /** Share of company answers lost after the call executed (an enrich charged): the connection is reset, as a network failure looks to a client. */
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

export const JSON_TYPE = 'application/json';
export const PROBLEM_TYPE = 'application/problem+json';

/** What a route answers; the handler sends it (after the drawn latency, when `delay`). */
export interface Answer {
  status: number;
  contentType: string;
  body: string;
  headers?: Record<string, string> | undefined;
  delay?: boolean;
  /** The x-request-id to send: unset for this request's own, null for none. */
  requestId?: string | null;
}

export const asAnswer = (p: ProblemResponse, delay = false): Answer => ({ status: p.status, contentType: PROBLEM_TYPE, body: p.body, headers: p.headers, delay });

/** A problem answer; all but 401, 403 and 429 come after the drawn latency. */
export function fail(config: HandlerConfig, status: number, code: string, requestId: string, detail?: string, extra?: Record<string, number | string>): Answer {
  return asAnswer(problem(config.typeBase, status, code, requestId, detail, extra), status !== 401 && status !== 403 && status !== 429);
}

/** Auth then the key's token bucket: the account when the request may proceed, else the answer. */
export function admit(config: HandlerConfig, req: IncomingMessage, requestId: string): { account: Account } | { answer: Answer } {
  const { stats } = config;
  stats.lastAt = Date.now();
  if (stats.firstAt === 0) stats.firstAt = stats.lastAt;
  const account = config.accounts.authenticate(req.headers.authorization);
  if (account === undefined) return { answer: fail(config, 401, 'invalid_token', requestId) };
  if (!account.scopes.has(SCOPE)) return { answer: fail(config, 403, 'insufficient_scope', requestId, `this endpoint needs the scope ${SCOPE}`) };
  if (account.gate !== null) {
    const taken = account.gate.take(config.now());
    if (!taken.ok) {
      const p = problem(config.typeBase, 429, 'rate_limited', requestId, `retry after ${taken.retryAfterSeconds}s`, { retryAfterSeconds: taken.retryAfterSeconds });
      return { answer: { ...asAnswer(p), headers: { 'retry-after': String(taken.retryAfterSeconds) } } };
    }
  }
  return { account };
}

/** Whether this call draws an injected 500. */
export const faulted = (config: HandlerConfig): boolean => config.failRate > 0 && config.random() < config.failRate;
