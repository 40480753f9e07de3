import {
  ApiError,
  ConnectionError,
  InternalServerError,
  IN_PROGRESS,
  NotServiceApiError,
  RateLimitedError,
  UnexpectedResponseError,
} from './errors.js';

export interface RetryPolicy {
  /** Attempts for server errors and lost answers, the first included. */
  maxAttempts: number;
  /** 429s are the service pacing us, not failures: they get a budget of their own. */
  maxRateLimitedAttempts: number;
  baseDelayMs: number;
  maxDelayMs: number;
  /** The longest Retry-After worth waiting out inside a run; beyond it the run stops and says "rerun later" rather than look hung. Default 300. */
  maxRetryAfterSeconds?: number;
}

export const DEFAULT_MAX_RETRY_AFTER_SECONDS = 300;

export const DEFAULT_RETRY_POLICY: RetryPolicy = {
  maxAttempts: 6,
  maxRateLimitedAttempts: 40,
  baseDelayMs: 300,
  maxDelayMs: 10_000,
  maxRetryAfterSeconds: DEFAULT_MAX_RETRY_AFTER_SECONDS,
};

/** setTimeout fires at once (and warns) for anything longer: 2^31-1 ms, about 24.8 days. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** Whether and when to retry (which key is pipeline/run-purchase.ts's call). `giveUp: 'wait_too_long'`: the service asked for a longer pause than allowed: stop, rerun later. */
export type RetryDecision =
  | { retry: false }
  | { retry: false; giveUp: 'wait_too_long'; waitSeconds: number }
  | { retry: true; delayMs: number };

export interface Attempts {
  /** Attempts so far, this one included, that failed with a server error or no answer. */
  failures: number;
  /** Attempts so far, this one included, answered 429. */
  rateLimited: number;
}

/** Full jitter (AWS architecture blog): uniform in [0, min(cap, base * 2^n)). */
export function backoffDelay(failures: number, policy: RetryPolicy, random: () => number): number {
  const ceiling = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** Math.max(0, failures - 1));
  return Math.floor(random() * ceiling);
}

/** "Equal jitter": half the doubling ceiling for sure, half at random, so one request's waits grow with each 429 (spec 7.3) while paused callers spread out. */
function rateLimitBackoff(rateLimited: number, policy: RetryPolicy, random: () => number): number {
  const ceiling = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** Math.max(0, rateLimited - 1));
  return Math.floor(ceiling / 2 + random() * (ceiling / 2));
}

function decideRateLimited(error: RateLimitedError, attempts: Attempts, policy: RetryPolicy, random: () => number): RetryDecision {
  if (error.retryAfterSeconds > (policy.maxRetryAfterSeconds ?? DEFAULT_MAX_RETRY_AFTER_SECONDS)) return { retry: false, giveUp: 'wait_too_long', waitSeconds: error.retryAfterSeconds };
  if (attempts.rateLimited >= policy.maxRateLimitedAttempts) return { retry: false };
  const delayMs = error.retryAfterSeconds * 1000 + rateLimitBackoff(attempts.rateLimited, policy, random);
  return { retry: true, delayMs: Math.min(delayMs, MAX_TIMER_MS) };
}

const isRetryable = (error: unknown): boolean =>
  (error instanceof ConnectionError && error.failure !== 'aborted') ||
  error instanceof InternalServerError ||
  // A broken 2xx or a proxy's 5xx page: the call may have run, so it is retried under the same key.
  // An answer from something that is not the service will be the same next time.
  (error instanceof UnexpectedResponseError && !(error instanceof NotServiceApiError) && !(error.status >= 400 && error.status < 500 && error.status !== 408)) ||
  (error instanceof ApiError && (error.status >= 500 || error.status === IN_PROGRESS));

/** Whether and when to retry, pure: a 429 after Retry-After plus a doubling backoff (too long a Retry-After gives up); 5xx and lost answers with full jitter; other 4xx never. */
export function decideRetry(error: unknown, attempts: Attempts, policy: RetryPolicy, random: () => number): RetryDecision {
  if (error instanceof RateLimitedError) return decideRateLimited(error, attempts, policy, random);
  if (!isRetryable(error) || attempts.failures >= policy.maxAttempts) return { retry: false };
  return { retry: true, delayMs: Math.min(backoffDelay(attempts.failures, policy, random), MAX_TIMER_MS) };
}
