import { ApiError, RateLimitedError } from '../api/errors.js';
import { decideRetry, type RetryPolicy } from '../api/retry.js';
import { formatWait } from '../errors.js';
import type { Health, Outage } from './health.js';
import type { Clock } from './clock.js';
import type { ProgressSink } from './progress.js';
import { NotSentError, StoppedError, type Flow, type Lane } from './flow.js';

export type Attempt<T> = { kind: 'ok'; value: T } | { kind: 'error'; error: unknown } | { kind: 'stopped' };

export interface AttemptHooks {
  /** Runs before each attempt (the enrich step writes its intent here); false ends the call as stopped; a throw (store unwritable) ends the run. */
  before?: () => Promise<boolean>;
  /** Sees every failure first; "again" means it describes the past (a replay), so the next attempt goes at once, counting against nothing. */
  failed?: (error: unknown) => 'again' | undefined;
  /** The attempt went under a key whose fate is open (lost at lostAt): its answer may be a replay (health.ts). Undefined: a fresh key. */
  lostKey?: () => { lostAt: number | null } | undefined;
  /** At most this many attempts, and this many 429s (a question whose answer is wanted now, or not at all). */
  limit?: number;
  /** Asked as the request leaves its slot (after queueing or a pause): true, and it is not sent but starts again from `before`, which must make it fresh. */
  stale?: () => boolean;
  /** Told as the call starts (true) and ends (false) a wait before its next attempt: it holds no slot meanwhile. */
  resting?: (on: boolean) => void;
}

export interface AttemptDeps {
  flow: Flow;
  clock: Clock;
  random: () => number;
  retry: RetryPolicy;
  progress: ProgressSink;
  /** Aborts requests already sent (once an interrupt's grace period is over). */
  inflight: AbortSignal;
  /** Until when every caller is held back (the flow's shared pause); 0: none. */
  pausedUntil: () => number;
  health: Health;
  /** Stops the run: the service is down, or asks to wait longer than it is worth. */
  unavailable(outage: Outage): void;
}

export type Attempter = <T>(lane: Lane, signal: AbortSignal, call: (s: AbortSignal) => Promise<T>, hooks?: AttemptHooks) => Promise<Attempt<T>>;

/** One logical call with retries, each attempt one scheduled request; whether and when to retry is api/retry.ts's pure decision. */
export function attempter(deps: AttemptDeps): Attempter {
  const { flow, clock, progress, inflight } = deps;
  return async function attempt<T>(lane: Lane, signal: AbortSignal, call: (s: AbortSignal) => Promise<T>, hooks: AttemptHooks = {}): Promise<Attempt<T>> {
    const attempts = { failures: 0, rateLimited: 0 };
    const send = (): Promise<T> => (hooks.stale?.() === true ? Promise.reject(new NotSentError('stale when its slot came')) : call(inflight));
    for (;;) {
      if (signal.aborted) return { kind: 'stopped' };
      if (hooks.before !== undefined && !(await hooks.before())) return { kind: 'stopped' };
      try {
        const value = await flow.run(lane, send, signal);
        deps.health.answered(lane === 'enrich');
        return { kind: 'ok', value };
      } catch (error) {
        if (error instanceof NotSentError) continue;
        if (error instanceof StoppedError || (inflight.aborted && !(error instanceof ApiError && error.definitive))) return { kind: 'stopped' };
        const outage = deps.health.failed(error, lane === 'enrich', hooks.lostKey?.());
        if (outage !== null) {
          // The outcome (a lost answer keeps its key) is recorded before the run stops.
          hooks.failed?.(error);
          deps.unavailable(outage);
          return { kind: 'stopped' };
        }
        if (hooks.failed?.(error) === 'again') continue;
        if (error instanceof RateLimitedError) attempts.rateLimited++;
        else attempts.failures++;
        const policy = hooks.limit === undefined ? deps.retry : { ...deps.retry, maxAttempts: Math.min(deps.retry.maxAttempts, hooks.limit), maxRateLimitedAttempts: Math.min(deps.retry.maxRateLimitedAttempts, hooks.limit) };
        const decision = decideRetry(error, attempts, policy, deps.random);
        if (!decision.retry && 'giveUp' in decision) {
          deps.unavailable({ message: `the service asks to wait ${formatWait(decision.waitSeconds)}; rerun the same command later`, worked: true });
          return { kind: 'stopped' };
        }
        if (!decision.retry) return { kind: 'error', error };
        // A pause holding every request is shown, so a wait never looks like a hang; a lone 429 only this request waits out is not a pause.
        if (error instanceof RateLimitedError && deps.pausedUntil() > clock.now()) progress({ type: 'paused', until: deps.pausedUntil() });
        progress({ type: 'retry' });
        hooks.resting?.(true);
        try {
          await clock.sleep(decision.delayMs, signal);
        } catch {
          return { kind: 'stopped' };
        } finally {
          hooks.resting?.(false);
        }
      }
    }
  };
}
