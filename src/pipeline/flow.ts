import { ConnectionError, RateLimitedError } from '../api/errors.js';
import type { Clock } from './clock.js';

/** The two kinds of request: enriches go first (spending is never starved), but in a run's end game. */
export type Lane = 'enrich' | 'match';

export class StoppedError extends Error {
  override readonly name = 'StoppedError';
}

/** A request its caller withdrew in its slot, before it left (AttemptHooks.stale): nothing was sent. */
export class NotSentError extends Error {
  override readonly name = 'NotSentError';
}

/** In flight before anything is known; the fewest while unpaced; paced, Little's law's count with HEADROOM for slow answers. */
const INITIAL_WINDOW = 8;
const MIN_UNPACED = 16;
const HEADROOM = 1.5;
/** Unpaced, the window grows while answers come within QUEUEING of the lane's floor (QUEUEING_FIRST of a near service's fastest at first), shrinks past CONGESTED. */
const QUEUEING = 1.5;
const QUEUEING_FIRST = 1.2;
const NEAR_MS = 100;
const CONGESTED = 3;
/** A lane's floor: the least smoothed latency over the last two spans of this long (or 2,000 answers). */
const SPAN_MS = 5_000;
/** An unrefused service keeps one in flight per this many accepted a second, up to 64. */
const PER_SECOND_FOR_ONE = 100;
const THROUGHPUT_FLOOR_MAX = 64;
/** Slow start grows the pace eightfold a second, never past twice what was accepted. */
const SLOW_START = 8;
/** A cut is BACKOFF, compounded by the last second's cuts; the climb back plateaus at PLATEAU of the ceiling. */
const BACKOFF = 0.95;
const PLATEAU = 0.99;
/** Ten cuts in a second did not stop the 429s: everyone waits, then goes on at MEASURED_FLOOR of what was accepted. */
const CLUSTER_CUTS = 10;
const MEASURED_FLOOR = 0.9;
/** Refusals this few releases apart mean over the ceiling (wider for a one-token bucket, whose cuts compound at most twice). */
const DENSE_SPACING = 10;
const SHALLOW_DENSE = 15;
const SHALLOW_COMPOUND = 2;
/** Against a one-token bucket, sparse refusals step the pace by STEP, balancing at SHALLOW_SHARE refused. */
const STEP = 0.01;
const SHALLOW_SHARE = 0.015;
/** Of a bucket of unknown depth, sparse refusals under this share (over about SHARE_SPAN requests) are jitter. */
const JITTER_SHARE = 0.015;
const SHARE_SPAN = 200;
/** CUBIC's time back to the plateau after a cut against a deep bucket. */
const CUBIC_SECONDS = 5;
/** After QUIET_MS held to the pace unrefused (one-token bucket: also QUIET_SHALLOW requests) the pace probes, doubling a second, and lands PROBE_LANDING under what it finds; a probe that found nothing doubles the next quiet, to QUIET_MAX_MS. */
const QUIET_MS = 4_000;
const QUIET_MAX_MS = 8_000;
const QUIET_SHALLOW = 100;
const PROBE_GROWTH = 2;
const PROBE_LANDING = 0.8;
/** Another run's end (peerLeft) starts a probe at an answer held to the pace within this long. */
const PEER_NEWS_MS = 2_000;
/** What was accepted is also measured sustained over this long: a deep bucket's last tokens inflate one second. */
const SUSTAINED_MS = 3_000;
/** A first wave with at most this many accepted, and more refused, is a one-token bucket. */
const SHALLOW_WAVE = 2;
/** The last stretch (fewer left than this many seconds at the pace): a 429 there costs a Retry-After, so the pace sits TAIL_MARGIN lower. */
const TAIL_SECONDS = 1.5;
const TAIL_MARGIN = 0.97;
/** Intervals from this long are kept to the fraction of a millisecond; a deep bucket lets a late release catch up this far. */
const PRECISE_FROM_MS = 4;
const CATCH_UP_MS = 5;

/** Why the pump's wait ends early; one made once (an abort without a reason builds a DOMException, its stack included, every time). */
const WOKEN = new Error('woken');

/** A request waiting for its turn; `gone` once its caller gave up. */
interface Waiter {
  readonly lane: Lane;
  readonly since: number;
  readonly signal: AbortSignal | undefined;
  readonly call: () => Promise<unknown>;
  resolve(value: unknown): void;
  reject(reason: unknown): void;
  gone: boolean;
}

/** The last `size` event times (in the order they came, so never decreasing): how many fell after a moment. */
class Recent {
  private readonly times: Float64Array;
  private count = 0;

  constructor(size: number) {
    this.times = new Float64Array(size);
  }

  add(t: number): void {
    this.times[this.count++ % this.times.length] = t;
  }

  since(from: number): number {
    let [lo, hi] = [Math.max(0, this.count - this.times.length), this.count];
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if ((this.times[mid % this.times.length] as number) > from) hi = mid;
      else lo = mid + 1;
    }
    return this.count - lo;
  }
}

/**
 * One endpoint's smoothed latency and its least over the last two spans (BBR's min RTT, per lane). In the cold first span a near service
 * is judged by its fastest answer: queueing in this process is most of such an answer, and all in flight at the first 429 is refused together.
 */
class LaneLatency {
  latency = 0;
  private floorNow = Number.POSITIVE_INFINITY;
  private floorBefore = Number.POSITIVE_INFINITY;
  private fastest = Number.POSITIVE_INFINITY;
  private spanStart = Number.NaN;
  private answers = 0;
  private seen = 0;
  private spans = 0;

  private get byFastest(): boolean {
    return this.spans === 0 && this.latency < NEAR_MS;
  }

  get floor(): number {
    return this.byFastest ? this.fastest : Math.min(this.floorNow, this.floorBefore);
  }

  /** Answers come about as fast as this endpoint can: more in flight would not only queue. */
  get unqueued(): boolean {
    return this.latency <= this.floor * (this.byFastest ? QUEUEING_FIRST : QUEUEING);
  }

  add(ms: number, busy: boolean, now: number): void {
    this.latency = this.latency === 0 ? ms : this.latency * 0.9 + ms * 0.1;
    this.fastest = Math.min(this.fastest, ms);
    if (Number.isNaN(this.spanStart)) this.spanStart = now;
    const first = this.spans === 0;
    if (++this.answers >= (first ? 200 : 2000) || now - this.spanStart >= (first ? 1000 : SPAN_MS)) {
      [this.floorBefore, this.floorNow, this.spanStart, this.answers] = [first ? Number.POSITIVE_INFINITY : this.floorNow, Number.POSITIVE_INFINITY, now, 0];
      this.spans++;
    }
    // Only a full window measures the service under our load; the first answers are single ones.
    if (++this.seen >= 10 && busy) this.floorNow = Math.min(this.floorNow, this.latency);
  }
}

/**
 * Every request waits in its lane and leaves one pacing interval after the last, while the window has room; answers teach both. The pace
 * is the service's token-bucket rate, learned from 429s: slow start until refusals come dense, a cut per dense refusal, a climb back under
 * the ceiling (CUBIC against a deep bucket); sparse refusals step it down. The window is Little's law once paced, latency-driven before.
 */
export class Flow {
  /** Requests a second; infinite until the first 429. */
  rate = Number.POSITIVE_INFINITY;
  pausedUntil = 0;
  /** Times every caller was held for a Retry-After. */
  pauses = 0;
  window: number;
  private readonly lanes: Record<Lane, (Waiter | undefined)[]> = { enrich: [], match: [] };
  private readonly watched = new WeakSet<AbortSignal>();
  private readonly heads: Record<Lane, number> = { enrich: 0, match: 0 };
  private waiting = 0;
  private inFlight = 0;
  private lastRelease = Number.NEGATIVE_INFINITY;
  private wake: AbortController | null = null;
  private pumping = false;
  private matchesFirstMs: number | null = null;
  private remaining: () => number = () => Number.POSITIVE_INFINITY;
  private inTail = false;
  private slowStart = true;
  private depth: 'unknown' | 'deep' | 'shallow' = 'unknown';
  private startedAt: number | null = null;
  private acceptedAll = 0;
  private firstRefusalAt = Number.NEGATIVE_INFINITY;
  private waveRefused = 0;
  private lastGrowth = 0;
  private lastStep = Number.NEGATIVE_INFINITY;
  private lastCut = Number.NEGATIVE_INFINITY;
  /** Slow start's end: where the pace was refused, or what the service accepted (TCP's ssthresh); CUBIC's plateau. */
  private threshold = Number.POSITIVE_INFINITY;
  private from = 0;
  private sinceCut = 0;
  private roundTrip = Number.POSITIVE_INFINITY;
  private released = 0;
  private lastRefusal = Number.NEGATIVE_INFINITY;
  /** Time held to the pace since the last refusal (ms), as of lastQuietAt. */
  private quiet = 0;
  private lastQuietAt = 0;
  private refusalBefore = Number.NEGATIVE_INFINITY;
  private readonly cuts = new Recent(CLUSTER_CUTS);
  /** The share of paced requests refused, a moving average over about SHARE_SPAN. */
  private refusedShare = 0;
  /** Enough for the throughput floor's 6,400 a second. */
  private readonly acceptedTimes = new Recent(8192);
  private readonly latency: Record<Lane, LaneLatency> = { enrich: new LaneLatency(), match: new LaneLatency() };
  private smoothed = 0;
  private growth = 0;
  /** A quiet probe's pace before it began; null while none is on. */
  private probeBase: number | null = null;
  /** The quiet a probe needs: doubled by each probe that found nothing more, up to QUIET_MAX_MS; back to QUIET_MS once one does. */
  private quietNeeded = QUIET_MS;
  /** Whether quiet stretches are probed: not once a Retry-After over a second was seen. */
  private probes = true;
  /** When a run sharing the key was last seen to end (peerLeft): news for PEER_NEWS_MS, cleared by a refusal, a probe or a new pass. */
  private peerLeftAt = Number.NEGATIVE_INFINITY;
  /** Whether the probe on was started by that news: one that finds nothing leaves the quiet the next needs as it was. */
  private probeOnNews = false;

  /** `concurrency`: the most requests ever in flight (the window is learned below it). */
  constructor(
    private readonly clock: Clock,
    private readonly concurrency: number,
  ) {
    this.window = Math.min(INITIAL_WINDOW, concurrency);
  }

  get paced(): boolean {
    return Number.isFinite(this.rate);
  }

  /** Where to ask how many requests the run has left (its last stretch); each pass tells it afresh. */
  remainingFrom(remaining: () => number): void {
    this.remaining = remaining;
    this.inTail = false;
    this.peerLeftAt = Number.NEGATIVE_INFINITY;
    this.endProbe();
  }

  /** Another run on the service ended: the share of the key it used may be free, so an answer held to the pace within PEER_NEWS_MS probes for it. */
  peerLeft(): void {
    // Whether probes are on is asked where the probe would start.
    if (this.probeBase === null) this.peerLeftAt = this.clock.now();
  }

  /** From now on waiting matches go before waiting enriches, but no enrich waits over `atMostMs`; null: enriches first. */
  matchesFirst(atMostMs: number | null): void {
    this.matchesFirstMs = atMostMs;
  }

  /** Runs `call` as one request. Rejects with StoppedError if `signal` aborts before it is sent. */
  run<T>(lane: Lane, call: () => Promise<T>, signal?: AbortSignal): Promise<T> {
    if (signal?.aborted === true) return Promise.reject(new StoppedError('stopped before it was sent'));
    this.startedAt ??= this.clock.now();
    // One listener a signal, not one a request: a run's thousands of requests share two.
    if (signal !== undefined && !this.watched.has(signal)) {
      this.watched.add(signal);
      signal.addEventListener('abort', () => this.drop(signal), { once: true });
    }
    return new Promise<T>((resolve, reject) => {
      this.lanes[lane].push({ lane, since: this.clock.now(), signal, call, resolve: resolve as (value: unknown) => void, reject, gone: false });
      this.waiting++;
      void this.pump();
    });
  }

  /** Every request still waiting under `signal` is stopped; a long pause must not hold the process open. */
  private drop(signal: AbortSignal): void {
    for (const lane of ['enrich', 'match'] as const) {
      for (let i = this.heads[lane]; i < this.lanes[lane].length; i++) {
        const waiter = this.lanes[lane][i];
        if (waiter === undefined || waiter.gone || waiter.signal !== signal) continue;
        waiter.gone = true;
        this.waiting--;
        waiter.reject(new StoppedError('stopped before it was sent'));
      }
    }
    this.kick();
  }

  private head(lane: Lane): Waiter | undefined {
    while (this.lanes[lane][this.heads[lane]]?.gone === true) this.shift(lane);
    return this.lanes[lane][this.heads[lane]];
  }

  /** Drops the lane's head, its slot cleared (a request gone keeps nothing alive), the array compacted now and then. */
  private shift(lane: Lane): void {
    const queue = this.lanes[lane];
    queue[this.heads[lane]] = undefined;
    if (++this.heads[lane] > 1024 && this.heads[lane] * 2 > queue.length) {
      this.lanes[lane] = queue.slice(this.heads[lane]);
      this.heads[lane] = 0;
    }
  }

  /** The next to go: the enrich lane's head, or in the end game the match lane's while no enrich has waited too long. */
  private next(): Waiter | undefined {
    const enrich = this.head('enrich');
    const match = this.head('match');
    if (match === undefined) return enrich;
    if (enrich === undefined) return match;
    const first = this.matchesFirstMs !== null && this.clock.now() - enrich.since <= this.matchesFirstMs;
    return first ? match : enrich;
  }

  private nextAt(): number {
    return Math.max(this.pausedUntil, this.paced ? this.lastRelease + 1000 / this.rate : 0);
  }

  private kick(): void {
    this.wake?.abort(WOKEN);
  }

  /** Releases waiters in order, one interval apart, while the window has room. One timer at a time. */
  private async pump(): Promise<void> {
    if (this.pumping) return;
    this.pumping = true;
    try {
      for (let waiter = this.next(); waiter !== undefined && this.inFlight < this.window; waiter = this.next()) {
        const now = this.clock.now();
        const at = this.nextAt();
        if (now < at) {
          this.wake = new AbortController();
          const precise = 1000 / this.rate >= PRECISE_FROM_MS;
          await (precise ? this.clock.until(at, this.wake.signal) : this.clock.sleep(at - now, this.wake.signal)).catch(() => {});
          this.wake = null;
          continue;
        }
        this.shift(waiter.lane);
        this.waiting--;
        this.inFlight++;
        this.released++;
        // The next interval counts from when this one left, not when it was due (a late timer
        // must not make the next gap short), but against a deep bucket, which absorbs it.
        this.lastRelease = this.depth === 'deep' ? Math.max(at, now - CATCH_UP_MS) : now;
        this.send(waiter.lane, waiter.call).then(waiter.resolve, waiter.reject);
      }
    } finally {
      this.pumping = false;
    }
  }

  private async send<T>(lane: Lane, call: () => Promise<T>): Promise<T> {
    const sentAt = this.clock.now();
    try {
      const value = await call();
      this.accepted(sentAt, lane, this.inFlight >= this.window, true);
      return value;
    } catch (error) {
      if (error instanceof RateLimitedError) this.refused(sentAt, error.retryAfterSeconds);
      // An error answer (a proxy's quick 5xx, a 4xx) is no measure of how fast the service works.
      else if (!(error instanceof ConnectionError) && !(error instanceof NotSentError)) this.accepted(sentAt, lane, this.inFlight >= this.window, false);
      throw error;
    } finally {
      this.inFlight--;
      void this.pump();
    }
  }

  /** An answer other than a 429; `busy`: every slot was taken as it came (it still holds its own). */
  private accepted(sentAt: number, lane: Lane, busy: boolean, ok: boolean): void {
    const now = this.clock.now();
    this.acceptedAll++;
    this.acceptedTimes.add(now);
    this.roundTrip = Math.min(this.roundTrip, Math.max(1, now - sentAt));
    if (this.paced) this.refusedShare -= this.refusedShare / SHARE_SPAN;
    if (ok) this.learnWindow(now - sentAt, lane, busy, now);
    this.startShallow();
    // Grow only while requests wait for the pace (neither input nor window is the bottleneck), and not on answers sent before the last cut.
    const paceBound = this.waiting > 0 && this.inFlight < this.window;
    if (!this.paced || !paceBound || sentAt <= this.lastCut || this.tail()) {
      this.lastGrowth = this.lastQuietAt = now;
      return;
    }
    const dt = Math.min(1000, now - this.lastGrowth) / 1000;
    this.quiet += Math.min(1000, now - this.lastQuietAt);
    this.lastQuietAt = now;
    const onNews = now - this.peerLeftAt <= PEER_NEWS_MS;
    if (this.probeBase !== null) {
      this.lastGrowth = now;
      this.rate = Math.max(this.rate, Math.min(this.rate * PROBE_GROWTH ** dt, 2 * this.acceptedRate(now)));
    } else if (this.probes && !this.slowStart && (onNews || (this.quiet >= this.quietNeeded && (this.depth !== 'shallow' || this.released - this.lastRefusal >= QUIET_SHALLOW)))) {
      this.probeOnNews = onNews;
      this.peerLeftAt = Number.NEGATIVE_INFINITY;
      // Long with no refusal, or another run on the key just ended: the ceiling may have moved. Probe for it.
      this.probeBase = this.rate;
      this.lastGrowth = now;
    } else if (this.depth === 'shallow' && !this.slowStart) {
      this.rate *= 1 + (STEP * SHALLOW_SHARE) / (1 - SHALLOW_SHARE);
    } else if (dt < 0.05) {
      return;
    } else if (this.slowStart) {
      this.lastGrowth = now;
      this.rate = Math.max(this.rate, Math.min(this.rate * SLOW_START ** dt, 2 * this.acceptedRate(now), this.threshold));
      if (this.rate >= this.threshold) this.slowStart = false;
    } else {
      // CUBIC's curve: fast at first, flat just under the ceiling, then probing past it.
      this.lastGrowth = now;
      this.sinceCut += dt;
      const x = (this.sinceCut - CUBIC_SECONDS) / CUBIC_SECONDS;
      this.rate = Math.max(1, this.threshold + (this.threshold - this.from) * x * x * x);
    }
    this.kick();
  }

  private refused(sentAt: number, retryAfterSeconds: number): void {
    const now = this.clock.now();
    // A wait of more than a second is no bucket refilling at a second's pace (a window, a daily quota): a probe there costs its whole wait.
    if (retryAfterSeconds > 1) this.probes = false;
    if (sentAt <= this.firstRefusalAt) {
      // The first wave refused nearly whole: a one-token bucket, refilled in an interval, so nobody waits and the pace starts at one a round trip.
      if (++this.waveRefused > SHALLOW_WAVE && this.depth === 'unknown') {
        this.depth = 'shallow';
        this.pausedUntil = now;
        this.kick();
        this.startShallow();
      }
      return;
    }
    if (!this.paced) {
      // The first 429: everything in flight went too fast, so everyone waits once, then goes on at what was accepted so far.
      this.pause(now, retryAfterSeconds);
      this.rate = Math.max(1, this.acceptedAll / Math.max(1, (now - (this.startedAt ?? now)) / 1000));
      this.firstRefusalAt = this.lastCut = this.lastGrowth = now;
      this.waveRefused = 1;
      if (this.acceptedAll > SHALLOW_WAVE) this.depth = 'deep';
      return;
    }
    // Answers to requests sent before the last cut say nothing about the pace since.
    if (sentAt <= this.lastCut) return;
    this.quiet = 0;
    this.peerLeftAt = Number.NEGATIVE_INFINITY;
    if (this.probeBase !== null) {
      // The probe found the ceiling: the pace refused, or what was accepted over the last second. If a little under it is more than where
      // the probe began, the curve climbs from there back to just under it; if not, the pace is back where it began, and the next probe
      // waits twice as long. Refusals of what the probe spent cut nothing for a Retry-After.
      const found = Math.min(this.rate * BACKOFF, PLATEAU * this.acceptedTimes.since(now - 1000));
      const base = this.endProbe();
      this.lastRefusal = this.released;
      const raised = found * PROBE_LANDING > base;
      if (raised || !this.probeOnNews) this.quietNeeded = raised ? QUIET_MS : Math.min(QUIET_MAX_MS, 2 * this.quietNeeded);
      if (raised) {
        [this.rate, this.threshold] = [found * PROBE_LANDING, found];
        this.climbFrom(now);
      }
      this.lastCut = now + retryAfterSeconds * 1000;
      return;
    }
    const shallow = this.depth === 'shallow';
    this.refusedShare += (1 - this.refusedShare) / SHARE_SPAN;
    const dense = shallow ? this.released - this.refusalBefore < SHALLOW_DENSE : this.released - this.lastRefusal < DENSE_SPACING;
    this.refusalBefore = this.lastRefusal;
    this.lastRefusal = this.released;
    if (dense) {
      this.cut(now, retryAfterSeconds);
    } else if (this.depth === 'deep' || (this.depth === 'unknown' && this.refusedShare > JITTER_SHARE)) {
      // A deep bucket refuses only once empty: the pace brushes its rate (of a bucket of unknown
      // depth, a share of refusals over what jitter explains says so). The curve starts again just under.
      this.threshold = this.rate * PLATEAU;
      this.rate = Math.max(1, this.rate * (1 - 2 * STEP));
      this.slowStart = false;
      this.climbFrom(now);
    } else if (shallow && sentAt > this.lastStep) {
      // Against a one-token bucket, one small step per refusal of a request sent since the last (a late one brings the next early).
      this.lastStep = now;
      this.rate = Math.max(1, this.rate * (1 - STEP));
      this.kick();
    }
  }

  /**
   * The pace is over the ceiling: cut it (harder per cut in the last second), then climb back under where it was refused (one-token
   * bucket) or under the lesser of what was accepted over 1 s and sustained over 3 s (a deep bucket, whose last tokens inflate either).
   */
  private cut(now: number, retryAfterSeconds: number): void {
    const shallow = this.depth === 'shallow';
    const compound = Math.min(shallow ? SHALLOW_COMPOUND : CLUSTER_CUTS, this.cuts.since(now - 1000) + 1);
    this.cuts.add(now);
    const measured = this.acceptedTimes.since(now - 1000);
    const refused = this.rate;
    this.rate = Math.max(1, this.rate * BACKOFF ** compound);
    this.threshold = Math.max(this.rate, PLATEAU * (shallow ? refused : Math.max(this.rate / BACKOFF, this.acceptedSince(now))));
    if (compound >= CLUSTER_CUTS) {
      this.pause(now, retryAfterSeconds);
      this.rate = Math.max(this.rate, MEASURED_FLOOR * measured);
      this.threshold = Math.max(this.threshold, PLATEAU * measured);
    }
    // A deep bucket climbs back along CUBIC's curve from here; a one-token bucket's slow start, if
    // still on, goes on up to the new threshold, and after it the share steps climb.
    if (!shallow) this.slowStart = false;
    this.climbFrom(now);
  }

  /** A cut at `now`: CUBIC's curve starts again from the pace as it is, and answers sent before it are ignored. */
  private climbFrom(now: number): void {
    this.from = this.rate;
    this.sinceCut = 0;
    this.lastCut = this.lastGrowth = now;
    this.kick();
  }

  /** Against a one-token bucket, slow start begins at a request a round trip, as one worker's would. */
  private startShallow(): void {
    if (this.depth !== 'shallow' || Number.isFinite(this.threshold) || !(this.rate < 1000 / this.roundTrip)) return;
    this.rate = 1000 / this.roundTrip;
    this.kick();
  }

  /** Accepted a second over the last second, or less when sustained over the last SUSTAINED_MS (0 before a second has passed). */
  private acceptedSince(now: number): number {
    const span = Math.min(SUSTAINED_MS, now - (this.startedAt ?? now));
    return span < 1000 ? 0 : Math.min((this.acceptedTimes.since(now - span) * 1000) / span, this.acceptedTimes.since(now - 1000));
  }

  /** Accepted a second since the last second began, or since a pause ended if later: what slow start and a probe may double. */
  private acceptedRate(now: number): number {
    const since = Math.max(now - 1000, this.pausedUntil);
    return (this.acceptedTimes.since(since) * 1000) / Math.max(100, now - since);
  }

  /** Ends a probe, the pace back where it began; returns that pace (the pace as it is when none is on). */
  private endProbe(): number {
    if (this.probeBase !== null) [this.rate, this.probeBase] = [this.probeBase, null];
    return this.rate;
  }

  private pause(now: number, retryAfterSeconds: number): void {
    this.quiet = 0;
    if (this.pausedUntil <= now) this.pauses++;
    this.pausedUntil = Math.max(this.pausedUntil, now + retryAfterSeconds * 1000);
    this.kick();
  }

  /** In a run's last stretch: the pace TAIL_MARGIN lower once, and growing no more until the run turns out longer. */
  private tail(): boolean {
    // Not in slow start: its pace is no estimate yet.
    if (this.slowStart) return false;
    const left = this.remaining();
    if (this.inTail) {
      this.inTail = left < 2 * this.rate * TAIL_SECONDS;
      return this.inTail;
    }
    if (left >= this.rate * TAIL_SECONDS) return false;
    this.inTail = true;
    this.endProbe();
    // Still climbing back after a cut: the climb's target may be a deep bucket's last tokens counted as its rate.
    const climbing = this.from > 0 && this.clock.now() - this.lastCut < 2 * CUBIC_SECONDS * 1000;
    this.rate = Math.max(1, (climbing ? Math.min(this.rate, this.from) : this.rate) * TAIL_MARGIN);
    this.kick();
    return true;
  }

  private learnWindow(ms: number, lane: Lane, busy: boolean, now: number): void {
    this.smoothed = this.smoothed === 0 ? ms : this.smoothed * 0.9 + ms * 0.1;
    const own = this.latency[lane];
    own.add(ms, busy, now);
    if (this.paced) {
      const before = this.window;
      this.window = Math.min(this.concurrency, Math.max(1, Math.ceil((this.rate * this.smoothed * HEADROOM) / 1000) + 2));
      if (this.window > before) void this.pump();
      return;
    }
    const floor = Math.max(MIN_UNPACED, Math.min(THROUGHPUT_FLOOR_MAX, Math.floor(this.acceptedTimes.since(now - 1000) / PER_SECOND_FOR_ONE)));
    const congested = busy && own.latency > own.floor * CONGESTED;
    if (congested && this.window > floor) this.window--;
    else if (busy && (this.window < floor || (!congested && own.unqueued))) {
      // One more per two answers: half again per round trip.
      this.growth += 0.5;
      if (this.growth >= 1) {
        this.growth -= 1;
        this.window = Math.min(this.concurrency, this.window + 1);
        void this.pump();
      }
    }
  }
}
