import { performance } from 'node:perf_hooks';
import { setTimeout as delay } from 'node:timers/promises';

/** Time as the pipeline sees it; tests pass a fake one. */
export interface Clock {
  /** Monotonic milliseconds. */
  now(): number;
  /** Resolves after `ms`, or rejects with the signal's reason when it aborts first. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

export const systemClock: Clock = {
  now: () => performance.now(),
  sleep: (ms, signal) => delay(Math.max(0, ms), undefined, signal === undefined ? undefined : { signal }),
};
