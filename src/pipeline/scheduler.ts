import { ConnectionError, RateLimitedError } from '../api/errors.js';
import type { Clock } from './clock.js';
import type { AdaptiveLimiter } from './limiter.js';

import { LaneQueue, type Lane } from './lanes.js';

export type { Lane } from './lanes.js';

export class StoppedError extends Error {
  override readonly name = 'StoppedError';
}

/** A request its caller withdrew in its slot, before it left (AttemptHooks.stale): nothing was sent. */
export class NotSentError extends Error {
  override readonly name = 'NotSentError';
}

/**
 * Requests in flight before anything is known about the service. Small, and growing by half
 * again per round trip rather than doubling: whatever is in flight when a bucket first runs dry
 * is refused together, so this is most of a run's 429s against a service with a ceiling.
 */
const INITIAL_WINDOW = 8;
/** Little's law gives the in-flight count the pace needs; this much more absorbs slow answers. */
const HEADROOM = 1.5;
/** Unpaced, the window grows while answers come back within this factor of the fastest lately... */
const QUEUEING = 1.5;
/** ...or, in a lane's first span, of its fastest answer yet (the smoothed latency is still cold). */
const QUEUEING_FIRST = 1.2;
/** ...and shrinks while they take more than this factor of it: requests wait in a queue somewhere. */
const CONGESTED = 3;
/** The fastest latency is the least over the last two spans of this many answers, or of this long. */
const FLOOR_SPAN = 2_000;
const FLOOR_SPAN_MS = 5_000;
/** The first span is short: the first answers of a run are slow (nothing is warm yet). */
const FIRST_SPAN = 200;
const FIRST_SPAN_MS = 1_000;
/**
 * The fastest answer yet is the first span's floor only while answers take less than this
 * (smoothed). Answers that vary far more than QUEUEING_FIRST on their own would otherwise hold the
 * window at 16 for the first second: uniform in 100-300 ms, the fastest is half the usual, and
 * 16 in flight carried 80 requests a second against a ceiling of 500. Under it, what requests
 * queued in this process add is most of the answer: the bench's local sandbox answered in 20-80 ms
 * while the client started on a loaded machine, and judged by a 10 ms bound the window reached
 * 38-53 before the first 429 (45-59 of 950 requests refused, against 25 at 16).
 */
const NEAR_MS = 100;
/** The smoothed latency counts towards the floor after this many answers: its first values are single answers. */
const WARM_ANSWERS = 10;
/** Unpaced, the window never shrinks below this (0.1's fixed window). */
const MIN_UNPACED = 16;
/**
 * ...nor below one in-flight request for every this many the service accepted over the last
 * second (no 429 yet), up to THROUGHPUT_FLOOR_MAX. A service answering thousands of requests a
 * second without refusing one is not burdened by a few dozen in flight, while 16 leave this
 * process's own costs per turn of its event loop (and the service's) unshared: against the
 * bench's local sandbox with paid enriches among the matches, 16 in flight took 1.15x as long as
 * 48 to 64. Bounded by what the service took, the first refusals of a ceiling found later come at
 * most as many as that: a fraction of a percent of a second's traffic.
 */
const PER_SECOND_FOR_ONE = 100;
const THROUGHPUT_FLOOR_MAX = 64;

/** One endpoint's latency, smoothed, and the least of it lately (matches and enriches differ). */
class LaneLatency {
  latency = 0;
  private floorNow = Number.POSITIVE_INFINITY;
  private floorBefore = Number.POSITIVE_INFINITY;
  private answers = 0;
  private seen = 0;
  private spans = 0;
  private spanStart = Number.NaN;

  /** The fastest single answer of the first span, and the floor until that span is over. */
  private fastest = Number.POSITIVE_INFINITY;

  /** In a near service's first span (NEAR_MS), judged by the fastest answer yet (below). */
  private get byFastest(): boolean {
    return this.spans === 0 && this.latency < NEAR_MS;
  }

  get floor(): number {
    // The first span's smoothed latency starts cold (high), so judged by it nothing looks like
    // queueing: a local service's first wave of requests grew to 44 in flight, and a ceiling's
    // first 429s came as many. Until it ends (a second at most), the fastest answer is the floor
    // of a near service (NEAR_MS).
    if (this.byFastest) return this.fastest;
    return Math.min(this.floorNow, this.floorBefore);
  }

  /** Answers come back about as fast as this endpoint can: more in flight would not only queue. */
  get unqueued(): boolean {
    return this.latency <= this.floor * (this.byFastest ? QUEUEING_FIRST : QUEUEING);
  }

  add(latencyMs: number, busy: boolean, now: number): void {
    this.latency = this.latency === 0 ? latencyMs : this.latency * 0.9 + latencyMs * 0.1;
    this.seen++;
    if (latencyMs < this.fastest) this.fastest = latencyMs;
    if (Number.isNaN(this.spanStart)) this.spanStart = now;
    const first = this.spans === 0;
    if (++this.answers >= (first ? FIRST_SPAN : FLOOR_SPAN) || now - this.spanStart >= (first ? FIRST_SPAN_MS : FLOOR_SPAN_MS)) {
      // The first span was cold: forget it rather than keep it as the span before.
      this.floorBefore = first ? Number.POSITIVE_INFINITY : this.floorNow;
      this.floorNow = Number.POSITIVE_INFINITY;
      this.answers = 0;
      this.spans++;
      this.spanStart = now;
    }
    // The least smoothed latency, not the fastest single answer: a service whose answers vary
    // (a cache, a long tail) has some far faster than its usual, and judged by those it would
    // look congested all the time. Only a full window measures the service under our load.
    if (busy && this.seen >= WARM_ANSWERS) this.floorNow = Math.min(this.floorNow, this.latency);
  }
}

/** Events counted over the last second, in tenths of it (a sliding window of ten buckets). */
class LastSecond {
  private readonly buckets = new Int32Array(10);
  private current = Number.NEGATIVE_INFINITY;
  count = 0;

  add(now: number): void {
    const tenth = Math.floor(now / 100);
    if (tenth !== this.current) {
      // The buckets of the tenths between the last event and this one are emptied.
      const from = this.current === Number.NEGATIVE_INFINITY ? tenth - 9 : Math.max(this.current + 1, tenth - 9);
      for (let t = from; t <= tenth; t++) {
        const i = ((t % 10) + 10) % 10;
        this.count -= this.buckets[i] as number;
        this.buckets[i] = 0;
      }
      this.current = tenth;
    }
    const at = ((tenth % 10) + 10) % 10;
    this.buckets[at] = (this.buckets[at] as number) + 1;
    this.count++;
  }
}

/**
 * How many requests may be in flight: learned, never above the user's bound.
 *
 * Paced, Little's law says the pace needs rate x latency in flight; the window keeps that with
 * headroom (and a few callers queued at the pacer, so the pace, not the window, is what binds).
 * Unpaced (no ceiling seen yet), it grows by one per two answers, half again every round trip (a
 * gentler TCP slow start), while the answers do not slow down; once they take several times the
 * fastest recent latency, requests are queueing (at the service, or in this process), more in
 * flight only adds latency and CPU, so it shrinks by one per answer until they speed up again.
 * Latency is judged per endpoint (a run moving from free matches to paid enriches is not a queue),
 * on successful answers only, and the fastest is a recent one, the least over the last few seconds
 * (BBR keeps its minimum round trip the same way): the first answers of a run are slow (nothing is
 * warm yet) and are forgotten after a second, and a service whose latency moved for good is judged
 * by its new latency within seconds.
 */
export class Window {
  size: number;
  /** Smoothed latency of all accepted answers: Little's law's. */
  private latency = 0;
  private readonly lanes: Record<Lane, LaneLatency> = { match: new LaneLatency(), enrich: new LaneLatency() };
  private growth = 0;
  private readonly accepted = new LastSecond();

  constructor(private readonly max: number) {
    this.size = Math.min(INITIAL_WINDOW, max);
  }

  /** Unpaced, the fewest in flight: MIN_UNPACED, or more for a service that has taken many a second. */
  private get unpacedFloor(): number {
    return Math.max(MIN_UNPACED, Math.min(THROUGHPUT_FLOOR_MAX, Math.floor(this.accepted.count / PER_SECOND_FOR_ONE)));
  }

  onAnswer(latencyMs: number, rate: number, busy: boolean, lane: Lane = 'match', now = 0): void {
    this.latency = this.latency === 0 ? latencyMs : this.latency * 0.9 + latencyMs * 0.1;
    const own = this.lanes[lane];
    own.add(latencyMs, busy, now);
    if (Number.isFinite(rate)) {
      this.size = Math.min(this.max, Math.max(1, Math.ceil((rate * this.latency * HEADROOM) / 1000) + 2));
      return;
    }
    this.accepted.add(now);
    const floor = this.unpacedFloor;
    const congested = busy && own.latency > own.floor * CONGESTED;
    if (congested && this.size > floor) {
      this.size--;
    } else if (busy && (this.size < floor || (!congested && own.unqueued))) {
      // Below the floor it grows however the answers come: that many in flight is not the trouble.
      // One more per two answers: half again per round trip.
      this.growth += 0.5;
      if (this.growth >= 1) {
        this.growth -= 1;
        this.size = Math.min(this.max, this.size + 1);
      }
    }
  }
}

/**
 * Runs single requests with at most the window's count in flight (lanes.ts, enriches first but in a run's end game), each
 * after the shared limiter grants it a slot. Every request goes through here, so this is where
 * answers are timed and told to the limiter.
 */
export class Scheduler {
  private readonly queue: LaneQueue;
  readonly window: Window;

  /** Until when the limiter holds every caller back (monotonic ms); 0 or past: not paused. */
  get pausedUntil(): number {
    return this.limiter.pausedUntil;
  }

  /** `concurrency` is the most requests ever in flight; how many are is learned below it. */
  constructor(
    private readonly limiter: AdaptiveLimiter,
    private readonly clock: Clock,
    concurrency: number,
  ) {
    this.window = new Window(concurrency);
    this.queue = new LaneQueue(this.window.size, () => clock.now());
  }

  /** Where the limiter asks how many requests the run has left to send (its last stretch). */
  remainingFrom(remaining: () => number): void {
    this.limiter.remainingFrom(remaining);
  }

  /** The pace learned, requests a second (infinite: none, or not yet). */
  get pace(): number {
    return this.limiter.rate;
  }

  /** Waiting matches go before waiting enriches from now on, but an enrich waits `atMostMs` at most (lanes.ts); null: enriches first. */
  matchesFirst(atMostMs: number | null): void {
    this.queue.matchesFirst = atMostMs;
  }

  /** Runs `call` as one request. Rejects with StoppedError if `signal` aborts before it starts. */
  run<T>(lane: Lane, call: () => Promise<T>, signal?: AbortSignal): Promise<T> {
    return this.queue.add(lane, () => this.send(lane, call, signal));
  }

  /** An answer other than a 429; `ok`: a success, whose time says how fast the service is. */
  private accepted(sentAt: number, lane: Lane, ok: boolean): void {
    const busy = this.queue.pending >= this.queue.concurrency;
    this.limiter.onAccepted(sentAt);
    const now = this.clock.now();
    // An error answer (a proxy's quick 5xx, a 4xx) is no measure of how fast the service works.
    if (ok) this.window.onAnswer(now - sentAt, this.limiter.rate, busy, lane, now);
    if (this.window.size !== this.queue.concurrency) this.queue.concurrency = this.window.size;
  }

  private async send<T>(lane: Lane, call: () => Promise<T>, signal: AbortSignal | undefined): Promise<T> {
    if (signal?.aborted === true) throw new StoppedError('stopped before it was sent');
    try {
      await this.limiter.acquire(signal);
    } catch {
      throw new StoppedError('stopped before it was sent');
    }
    const sentAt = this.clock.now();
    try {
      const value = await call();
      this.accepted(sentAt, lane, true);
      return value;
    } catch (error) {
      if (error instanceof RateLimitedError) this.limiter.onRateLimited(sentAt, error.retryAfterSeconds);
      else if (!(error instanceof ConnectionError) && !(error instanceof NotSentError)) this.accepted(sentAt, lane, false);
      throw error;
    }
  }
}
