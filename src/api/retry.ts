import {
  ApiError,
  ConnectionError,
  InternalServerError,
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
}

export const DEFAULT_RETRY_POLICY: RetryPolicy = {
  maxAttempts: 6,
  maxRateLimitedAttempts: 40,
  baseDelayMs: 300,
  maxDelayMs: 10_000,
};

/** Whether and when to try again. Which Idempotency-Key the next try uses is pipeline/keys.ts's call. */
export type RetryDecision = { retry: false } | { retry: true; delayMs: number };

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

/**
 * Whether and when to try a failed call again: a pure decision, unit-tested on its own.
 * 429: after at least Retry-After, plus a little jitter so paused callers do not return together.
 * 5xx and lost answers: capped exponential backoff with full jitter. Other 4xx: never.
 */
export function decideRetry(error: unknown, attempts: Attempts, policy: RetryPolicy, random: () => number): RetryDecision {
  if (error instanceof RateLimitedError) {
    if (attempts.rateLimited >= policy.maxRateLimitedAttempts) return { retry: false };
    const jitter = Math.floor(random() * Math.min(1000, policy.baseDelayMs * 2 ** Math.min(attempts.rateLimited - 1, 4)));
    return { retry: true, delayMs: error.retryAfterSeconds * 1000 + jitter };
  }
  const retryable =
    error instanceof ConnectionError ||
    error instanceof InternalServerError ||
    // A broken 2xx or a proxy's 5xx page: the call may have run, so it is retried under the same key.
    (error instanceof UnexpectedResponseError && !(error.status >= 400 && error.status < 500 && error.status !== 408)) ||
    (error instanceof ApiError && error.status >= 500);
  if (!retryable || attempts.failures >= policy.maxAttempts) return { retry: false };
  return { retry: true, delayMs: backoffDelay(attempts.failures, policy, random) };
}
