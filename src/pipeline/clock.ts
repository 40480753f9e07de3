import { setTimeout as delay } from 'node:timers/promises';
import { MAX_TIMER_MS } from '../api/retry.js';

/** Time as the pipeline sees it; tests pass a fake one. */
export interface Clock {
  /** Monotonic milliseconds. */
  now(): number;
  /** Resolves after `ms`, or rejects with the signal's reason when it aborts first. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
  /** Resolves at `deadline` (a `now()` value) as exactly as it can; rejects like sleep. */
  until(deadline: number, signal?: AbortSignal): Promise<void>;
}

/**
 * The last stretch of a precise wait is spent in setImmediate turns, not on a timer: Node's timers fire on whole ms and often one
 * late, and a one-token bucket refuses anything slightly early. Costs at most about this much CPU per wait.
 */
const PRECISE_MS = 1;

const [originS, originNs] = process.hrtime();

/** Monotonic ms since load: `performance.now()` without node:perf_hooks, whose internal modules cost start-up. */
export function monotonicMs(): number {
  const [s, ns] = process.hrtime();
  return (s - originS) * 1e3 + (ns - originNs) / 1e6;
}

// Past 2^31-1 ms Node fires the timer at once (with a warning): a huge pause would become a
// busy loop. A capped sleep wakes early instead, and its caller looks at the time again.
const sleep = (ms: number, signal?: AbortSignal): Promise<void> =>
  delay(Math.min(MAX_TIMER_MS, Math.max(0, ms)), undefined, signal === undefined ? undefined : { signal });

/** Resolves at `deadline`: a timer to about PRECISE_MS before, then event-loop turns. An abort seen at any turn rejects, even past the deadline. */
export async function preciseUntil(deadline: number, signal: AbortSignal | undefined, now: () => number = monotonicMs): Promise<void> {
  for (;;) {
    const left = deadline - now();
    signal?.throwIfAborted();
    if (left <= 0) return;
    if (left > PRECISE_MS) await sleep(left - PRECISE_MS, signal);
    else await new Promise<void>((resolve) => setImmediate(resolve));
  }
}

export const systemClock: Clock = {
  now: monotonicMs,
  sleep,
  until: (deadline, signal) => preciseUntil(deadline, signal),
};
