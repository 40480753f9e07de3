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
 * How much of a precise wait is spent yielding to the event loop rather than on a timer. Node's
 * timers fire on whole milliseconds and often one late, so a pacer on timers alone leaves gaps
 * about a millisecond longer than it meant (a tenth of the rate at 100 requests a second), while
 * a one-token bucket refuses anything that comes even slightly early. The last stretch before the
 * deadline is therefore spent in setImmediate turns (I/O still runs between them): sub-millisecond
 * precision for at most about this much CPU per wait (callers use it only for waits several times
 * longer).
 */
const PRECISE_MS = 1;

const [originS, originNs] = process.hrtime();

/**
 * Monotonic milliseconds since this module loaded: `performance.now()` without node:perf_hooks,
 * whose dozen internal modules are a measurable share of a quick rerun's start-up.
 */
export function monotonicMs(): number {
  const [s, ns] = process.hrtime();
  return (s - originS) * 1e3 + (ns - originNs) / 1e6;
}

// Past 2^31-1 ms Node fires the timer at once (with a warning): a huge pause would become a
// busy loop. A capped sleep wakes early instead, and its caller looks at the time again.
const sleep = (ms: number, signal?: AbortSignal): Promise<void> =>
  delay(Math.min(MAX_TIMER_MS, Math.max(0, ms)), undefined, signal === undefined ? undefined : { signal });

/**
 * Resolves at `deadline` on the clock `now`: a timer to about PRECISE_MS before it, then event-loop
 * turns. An abort is seen at every turn, before the time is: one that came while the wait was on
 * rejects it, even if the deadline has passed by the turn that sees it.
 */
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
