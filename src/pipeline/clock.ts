import { performance } from 'node:perf_hooks';
import { setTimeout as delay } from 'node:timers/promises';
import { MAX_TIMER_MS } from '../api/retry.js';

/** Time as the pipeline sees it; tests pass a fake one. */
export interface Clock {
  /** Monotonic milliseconds. */
  now(): number;
  /** Resolves after `ms`, or rejects with the signal's reason when it aborts first. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

export const systemClock: Clock = {
  now: () => performance.now(),
  // Past 2^31-1 ms Node fires the timer at once (with a warning): a huge pause would become a
  // busy loop. A capped sleep wakes early instead, and its caller looks at the time again.
  sleep: (ms, signal) => delay(Math.min(MAX_TIMER_MS, Math.max(0, ms)), undefined, signal === undefined ? undefined : { signal }),
};
