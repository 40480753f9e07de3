import pLimit, { type LimitFunction } from 'p-limit';
import { ConnectionError, RateLimitedError } from '../api/errors.js';
import type { Clock } from './clock.js';
import type { AdaptiveLimiter } from './limiter.js';
import { Queue } from './queue.js';

/** Paid enriches go before free matches, so a long match phase never starves spending. */
export type Lane = 'enrich' | 'match';

interface Job {
  run: () => Promise<unknown>;
  resolve: (value: unknown) => void;
  reject: (reason: unknown) => void;
  signal: AbortSignal | undefined;
}

export class StoppedError extends Error {
  override readonly name = 'StoppedError';
}

/**
 * Runs single requests with at most `concurrency` in flight (p-limit), each after the shared
 * limiter grants it a slot. Every submitted job adds one p-limit task; whichever task starts
 * takes the best job waiting at that moment, so priority holds however jobs were queued.
 */
export class Scheduler {
  private readonly limit: LimitFunction;
  private readonly queues: Record<Lane, Queue<Job>> = { enrich: new Queue(), match: new Queue() };

  constructor(
    private readonly limiter: AdaptiveLimiter,
    private readonly clock: Clock,
    concurrency: number,
  ) {
    this.limit = pLimit(concurrency);
  }

  /** Runs `call` as one request. Rejects with StoppedError if `signal` aborts before it starts. */
  run<T>(lane: Lane, call: () => Promise<T>, signal?: AbortSignal): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.queues[lane].push({ run: call, resolve: resolve as (v: unknown) => void, reject, signal });
      void this.limit(() => this.next());
    });
  }

  private async next(): Promise<void> {
    const job = this.queues.enrich.shift() ?? this.queues.match.shift();
    if (job === undefined) return;
    if (job.signal?.aborted === true) {
      job.reject(new StoppedError('stopped before it was sent'));
      return;
    }
    try {
      await this.limiter.acquire(job.signal);
    } catch {
      job.reject(new StoppedError('stopped before it was sent'));
      return;
    }
    const sentAt = this.clock.now();
    try {
      const value = await job.run();
      this.limiter.onAccepted(sentAt);
      job.resolve(value);
    } catch (error) {
      if (error instanceof RateLimitedError) this.limiter.onRateLimited(sentAt, error.retryAfterSeconds);
      else if (!(error instanceof ConnectionError)) this.limiter.onAccepted(sentAt);
      job.reject(error);
    }
  }
}
