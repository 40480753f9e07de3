import type { Clock } from './clock.js';
import { Pacer, type Pace } from './pacer.js';

export interface LimiterOptions {
  clock: Clock;
  /** Start unpaced (the ceiling is unknown until a 429 reveals it) unless told a rate. */
  initialRate?: number;
  /** Fraction of the pace kept after a 429 once the ceiling is known (CUBIC's beta). */
  backoff?: number;
  /** Seconds of saturated running to climb back to the plateau after a cut (CUBIC's K). */
  plateauSeconds?: number;
}

/**
 * Paces requests to a rate it learns from the service, shared by every worker.
 *
 * The service's limit behaves like a token bucket of unknown rate and depth. With a deep bucket
 * a lost second costs little (the bucket refills and we spend it after); with a shallow one every
 * lost second is gone. So the pace must sit just under the ceiling, and a 429 must cost little:
 *
 * - The first 429 ends the unpaced start. Everything in flight was sent too fast, so this is the
 *   one pause for everyone (its Retry-After). The pace is then set from what was accepted, and
 *   grows eightfold a second of saturated running (slow start) until a 429 arrives while paced.
 * - After that, a 429 is an overshoot of a pace we set, not a flood: only the request that got it
 *   waits out Retry-After (the executor's retry does; spec 7.3). Everyone else goes on at a pace
 *   cut below the one that overshot, so the bucket refills while we keep sending. The pace then
 *   climbs back along CUBIC's curve: fast at first, flat 1% under the ceiling, then probing.
 * - Only when the cuts do not stop the 429s (several cuts within a second: the bucket is empty and
 *   we are far over) is everyone paused again for the Retry-After.
 * - A bucket one token deep shows itself in the first wave (nearly all of it refused). It refills
 *   in one interval, so nobody waits for it, and it refuses some requests at any pace near its rate
 *   (any that arrive early): there the pace settles where a small share is refused (SHALLOW_SHARE).
 *
 * Callers leave one pacing interval apart (pacer.ts), so a pause never ends in a thundering herd.
 */
const PLATEAU_LEVEL = 0.99;
/** Slow start's growth per second of saturated running. */
const SLOW_START_GROWTH = 8;
/** Cuts within a second (together to a twentieth of the pace) that show the ceiling fell. */
const CLUSTER_CUTS = 10;
/**
 * The share of paced requests refused that is taken for jitter, not for a pace over the ceiling
 * (for a bucket known to be one token deep, SHALLOW_SHARE instead). A shallow bucket refuses a
 * request that arrives even slightly early, and the way to the service now and then delays one
 * request by a millisecond or more, which brings the next one early: at
 * any pace near a one-token bucket's rate, some requests are refused, fewer the further below it
 * the pace sits, but with a long tail (measured on loopback here: 5% at 0.98 of the rate, 2% at
 * 0.91, 1% at 0.82). Cutting for each would walk the pace down a long way for refusals it cannot
 * remove; so below this share a refusal cuts nothing, and above it one cuts a little.
 */
const JITTER_SHARE = 0.015;
/** The refused share is a moving average over about this many paced requests. */
const SHARE_SPAN = 200;
/** The cut for a share over JITTER_SHARE: the pace brushes the ceiling, it is not far over it. */
const SHARE_BACKOFF = 0.98;
/** 429s fewer paced requests apart than this are the pace over the ceiling, not brushing it. */
const DENSE_SPACING = 10;
/**
 * While the service refuses requests it is saturated, so what it accepts is its ceiling, give or
 * take a deep bucket's last tokens. After cuts that compounded, CUBIC's plateau is at least 0.99 of
 * what it accepted a second over the last SUSTAINED_MS or over the last second, whichever is less
 * (not only of the pace one step up: cuts compounded from slow start landed at 0.76 of a 500 req/s
 * ceiling, and sat there; over the last second alone, a deep bucket's tokens refilled during a
 * pause counted as its rate; over three alone, early in a run, its first tokens did). A pause for
 * cuts that did not stop the 429s ends at MEASURED_FLOOR of what it accepted over the last
 * second: a gateway counting per fixed window refuses every request up to its boundary however
 * far the pace is cut, and ten cuts in a second took the pace to a twentieth of its count, and the
 * curve back to one step up never reached it (simulated: 0.62 of the ceiling over a run).
 */
const SUSTAINED_MS = 3_000;
const MEASURED_FLOOR = 0.9;
/**
 * A bucket one token deep refuses a request that arrives even slightly early, at any pace near
 * its rate: the pace that gets the most through accepts a few refusals. A client told the ceiling
 * does best where 2% to 3% of its requests are refused (simulated with the way there jittering
 * uniformly, with a long tail, and on a whole-millisecond clock; the bench's one-token row agrees).
 * So against such a bucket each refusal steps the pace down by SHALLOW_STEP and each acceptance
 * steps it up by so much less that the two balance where SHALLOW_SHARE of requests are refused:
 * a little under that best, since a bucket with no jitter refuses only a pace past its rate, and
 * there every refusal is waste (the project holds 2% there).
 */
const SHALLOW_SHARE = 0.015;
const SHALLOW_STEP = 0.01;
/** The first wave shows such a bucket: at most this many accepted before its first 429... */
const SHALLOW_ACCEPTED = 2;
/** ...and at least this many of the requests in flight then refused. */
const SHALLOW_REFUSED = 3;
/** Against it, three refusals within this many requests are the pace over its rate, not jitter... */
const SHALLOW_DENSE = 15;
/**
 * ...and cuts compound no further than this: its refusals show within a round trip, so a series of
 * cuts ends as soon as the pace is under its rate, and a cut compounded with those of a series in
 * the same second (the first round trips, far over) took the pace to 0.6 of its rate for a refusal
 * that was jitter.
 */
const SHALLOW_COMPOUND = 2;

/**
 * A run's last stretch: fewer requests left than this many seconds' worth at the pace (once slow
 * start is over). A request refused there waits out its Retry-After after the rest are done, so
 * the run ends that much later (a second of a 12-second run), while a faster pace found there
 * would buy nothing: the pace stops growing and sits TAIL_MARGIN lower, until the run turns out
 * longer (twice the stretch left). Against a 500 req/s bucket 500 deep, with answers in
 * 100-300 ms, half the simulated runs lost a second so (climbing back to a plateau a deep bucket's
 * last tokens had inflated) and ended at 0.91 to 0.94 of the ceiling; the bench's row did too.
 */
const TAIL_SECONDS = 1.5;
const TAIL_MARGIN = 0.97;

/** The last `size` event times: how many fell after a given moment. */
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
    const n = Math.min(this.count, this.times.length);
    let found = 0;
    for (let i = 0; i < n; i++) if ((this.times[i] as number) > from) found++;
    return found;
  }
}

export class AdaptiveLimiter implements Pace {
  rate: number;
  pausedUntil = 0;
  /** Times every caller was held for a Retry-After: the learning pause, and any cluster. */
  pauses = 0;
  private readonly pacer: Pacer;
  private slowStart = true;
  private lastDecrease = Number.NEGATIVE_INFINITY;
  private lastGrowth = 0;
  /** CUBIC's curve: from the pace after the last cut up to a plateau under the last ceiling. */
  private from = 0;
  private plateauRate = Number.POSITIVE_INFINITY;
  private sinceDecrease = 0;
  private startedAt: number | null = null;
  private readonly accepted = new Recent(4096);
  /** How many callers had been released when the last 429 (of a paced request) came, and before it. */
  private lastRefusal = Number.NEGATIVE_INFINITY;
  private refusalBefore = Number.NEGATIVE_INFINITY;
  /** The first 429 of the unpaced start, and what the requests in flight then came back as. */
  private firstRefusalAt = Number.NEGATIVE_INFINITY;
  private acceptedAll = 0;
  private firstWave = { accepted: 0, refused: 0 };
  /**
   * How deep the bucket is, as the first wave showed: `deep` when it let more than a couple of
   * requests through (it absorbs jitter: any refusal is the pace over its rate), `shallow` when it
   * refused nearly all (SHALLOW_SHARE), `unknown` until then or when the pace was given.
   */
  private depth: 'unknown' | 'deep' | 'shallow' = 'unknown';
  /** Against a one-token bucket, where slow start ends (below). */
  private threshold = Number.POSITIVE_INFINITY;
  /** The fastest accepted answer, ms (at least 1). */
  private roundTrip = Number.POSITIVE_INFINITY;
  private lastStep = Number.NEGATIVE_INFINITY;
  /** Moving average of the share of paced requests refused. */
  private refusedShare = 0;
  private readonly cuts = new Recent(CLUSTER_CUTS);
  private readonly backoff: number;
  private readonly plateau: number;
  /** Requests the run has left to send, as its executor estimates them (remainingFrom). */
  private remaining: () => number = () => Number.POSITIVE_INFINITY;
  private inTail = false;

  constructor(private readonly options: LimiterOptions) {
    this.rate = options.initialRate ?? Number.POSITIVE_INFINITY;
    this.backoff = options.backoff ?? 0.95;
    this.plateau = options.plateauSeconds ?? 5;
    this.pacer = new Pacer(options.clock, this);
  }

  /** Callers queued for a slot right now: demand beyond the pace. */
  get queued(): number {
    return this.pacer.queued;
  }

  /**
   * Where to ask how many requests the run has left to send (an estimate; a run's last stretch:
   * TAIL_SECONDS). Each pass over the work tells it afresh: the last stretch of a dry pass (a
   * terminal's question before buying) is not the purchase pass's.
   */
  remainingFrom(remaining: () => number): void {
    this.remaining = remaining;
    this.inTail = false;
  }

  /**
   * Once in a run's last stretch: the pace TAIL_MARGIN lower, and growing no more. Still climbing
   * back after a cut (within two plateaus of it), from where that cut left it: the climb's target
   * may be a deep bucket's last tokens counted as its rate, and the pace may be over the ceiling
   * again before a refusal says so.
   */
  private tail(): boolean {
    // Not in slow start: its pace is no estimate of the ceiling, and held there it stayed far under.
    if (!this.paced || this.slowStart) return false;
    const left = this.remaining();
    if (this.inTail) {
      // Left again when the run outlives it (retries, a cut): growth goes on along the curve.
      if (left < 2 * this.rate * TAIL_SECONDS) return true;
      this.inTail = false;
      return false;
    }
    if (left >= this.rate * TAIL_SECONDS) return false;
    this.inTail = true;
    const recovering = this.from > 0 && this.options.clock.now() - this.lastDecrease < 2 * this.plateau * 1000;
    this.rate = Math.max(1, (recovering ? Math.min(this.rate, this.from) : this.rate) * TAIL_MARGIN);
    this.kick();
    return true;
  }

  /** Whether a pace has been learned (or given): before it, nothing holds callers back but a pause. */
  get paced(): boolean {
    return Number.isFinite(this.rate);
  }

  /** A late release may be caught up only against a bucket known to be deep (pacer.ts). */
  get catchUp(): boolean {
    return this.depth === 'deep';
  }

  /** Waits for this caller's turn. Callers go in arrival order, one pacing interval apart. */
  acquire(signal?: AbortSignal): Promise<void> {
    this.startedAt ??= this.options.clock.now();
    return this.pacer.acquire(signal);
  }

  /** Re-evaluates the queue now (the pace or the pause changed). */
  private kick(): void {
    this.pacer.kick();
  }

  /** A request sent at `sentAt` was answered, with anything but 429. */
  onAccepted(sentAt: number): void {
    const now = this.options.clock.now();
    this.accepted.add(now);
    this.acceptedAll++;
    if (this.paced) this.refusedShare *= 1 - 1 / SHARE_SPAN;
    this.roundTrip = Math.min(this.roundTrip, Math.max(1, now - sentAt));
    this.startShallow();
    const dt = Math.min(1000, now - this.lastGrowth) / 1000;
    // Grow only while callers queue for the pacer (the pace, not the input, is the bottleneck),
    // and not on answers to requests sent before the last decrease.
    if (!this.paced || this.pacer.queued === 0 || sentAt <= this.lastDecrease || this.tail()) {
      this.lastGrowth = now;
      return;
    }
    if (this.depth === 'shallow' && !this.slowStart) {
      this.rate *= 1 + (SHALLOW_STEP * SHALLOW_SHARE) / (1 - SHALLOW_SHARE);
      this.lastGrowth = now;
      this.kick();
      return;
    }
    if (dt < 0.05) return;
    this.lastGrowth = now;
    if (this.slowStart) {
      // Never more than twice what was accepted over the last second: when the window, not the
      // pace, is what holds requests back, a pace grown on paper would be a burst when it opens.
      const since = Math.max(now - 1000, this.pausedUntil);
      const accepted = (this.accepted.since(since) * 1000) / Math.max(100, now - since);
      this.rate = Math.max(this.rate, Math.min(this.rate * SLOW_START_GROWTH ** dt, 2 * accepted, this.threshold));
      if (this.rate >= this.threshold) this.slowStart = false;
    } else {
      this.sinceDecrease += dt;
      // CUBIC's curve, with its flat part 1% under the last ceiling: a shallow bucket 429s the
      // moment the pace touches its rate, so the plateau must sit below it, not on it.
      const x = (this.sinceDecrease - this.plateau) / this.plateau;
      this.rate = Math.max(1, this.plateauRate + (this.plateauRate - this.from) * x * x * x);
    }
    this.kick();
  }

  /**
   * Accepted answers a second over the last SUSTAINED_MS (0 before a second of running): what the
   * service sustains while it refuses some. Over one second, a deep bucket's tokens refilled while
   * everyone paused counted as its rate, and the pace climbed back over it for a string of 429s.
   */
  private sustainedRate(now: number): number {
    const span = Math.min(SUSTAINED_MS, now - (this.startedAt ?? now));
    return span < 1000 ? 0 : (this.accepted.since(now - span) * 1000) / span;
  }

  /** Accepted answers a second since the start (over one second at least). */
  private acceptedRate(now: number): number {
    const span = Math.max(1, (now - (this.startedAt ?? now)) / 1000);
    return this.accepted.since(now - span * 1000) / span;
  }

  private pause(now: number, retryAfterSeconds: number): void {
    if (this.pausedUntil <= now) this.pauses++;
    this.pausedUntil = Math.max(this.pausedUntil, now + retryAfterSeconds * 1000);
    this.kick();
  }

  /** A request sent at `sentAt` was answered 429 with this Retry-After. */
  onRateLimited(sentAt: number, retryAfterSeconds: number): void {
    const now = this.options.clock.now();
    if (sentAt <= this.firstRefusalAt) this.inFirstWave();
    // The answers to requests sent before the last cut say nothing about the pace since.
    if (sentAt <= this.lastDecrease) return;
    if (!this.paced) {
      // The first 429 of an unpaced start: the bucket is empty and everything in flight was sent
      // too fast, so everyone waits once. What was accepted so far is the first estimate.
      this.pause(now, retryAfterSeconds);
      this.rate = Math.max(1, this.acceptedRate(now));
      this.firstRefusalAt = now;
      this.firstWave = { accepted: this.acceptedAll, refused: 1 };
      if (this.acceptedAll > SHALLOW_ACCEPTED) this.depth = 'deep';
      this.lastDecrease = now;
      this.lastGrowth = now;
      return;
    }
    this.refusedShare = this.refusedShare * (1 - 1 / SHARE_SPAN) + 1 / SHARE_SPAN;
    const shallow = this.depth === 'shallow';
    const dense = shallow ? this.pacer.released - this.refusalBefore < SHALLOW_DENSE : this.pacer.released - this.lastRefusal < DENSE_SPACING;
    this.refusalBefore = this.lastRefusal;
    this.lastRefusal = this.pacer.released;
    if (dense) this.overshot(now, retryAfterSeconds);
    else if (shallow) this.stepDown(sentAt, now);
    else if (this.depth === 'deep' || this.refusedShare > JITTER_SHARE) {
      // The pace brushes the ceiling: a deep bucket refuses only once it is empty, so even a lone
      // refusal says the pace is over its rate; of a bucket of unknown depth, a share over what
      // jitter explains does.
      this.slowStart = false;
      this.cut(this.rate * SHARE_BACKOFF, this.rate * PLATEAU_LEVEL);
      this.lastDecrease = now;
      this.lastGrowth = now;
    }
  }

  /**
   * A refusal of a request sent before the first 429. When nearly all of that first wave was
   * refused the bucket is one token deep: it refills in one interval, so the pause for everyone
   * would buy nothing, and its refusals are to be read as a one-token bucket's (SHALLOW_SHARE).
   */
  private inFirstWave(): void {
    this.firstWave.refused++;
    if (this.depth !== 'unknown' || this.firstWave.refused < SHALLOW_REFUSED) return;
    this.depth = 'shallow';
    this.pausedUntil = Math.min(this.pausedUntil, this.options.clock.now());
    this.startShallow();
    this.kick();
  }

  /**
   * Against a one-token bucket slow start begins at one request a round trip (as one worker sending
   * one after another would), not at the one request a second the first wave got through.
   */
  private startShallow(): void {
    if (this.depth !== 'shallow' || Number.isFinite(this.threshold) || this.rate >= 1000 / this.roundTrip) return;
    this.rate = 1000 / this.roundTrip;
    this.kick();
  }

  /** A sparse refusal from a one-token bucket: one small step down per refusal of a request sent since the last. */
  private stepDown(sentAt: number, now: number): void {
    if (sentAt <= this.lastStep) return;
    this.lastStep = now;
    this.rate = Math.max(1, this.rate * (1 - SHALLOW_STEP));
    this.kick();
  }

  /**
   * Refusals a few requests apart: the pace is over the ceiling. Cuts that follow each other
   * within a second cut harder each time (a deep bucket hid how far slow start went past the
   * ceiling, and the pace must come down in a few round trips, not in a second's worth of 429s).
   */
  private overshot(now: number, retryAfterSeconds: number): void {
    const shallow = this.depth === 'shallow';
    // Against a one-token bucket, slow start goes on after cuts, up to just under the last pace
    // refused (TCP's ssthresh): the first round trips of a run, at one request each, may have
    // been far over its rate, and cuts compounding from there land far under it. Nobody waits
    // for a pause either: the bucket refills in an interval.
    if (shallow) this.threshold = this.rate * PLATEAU_LEVEL;
    else this.slowStart = false;
    const recentCuts = Math.min(shallow ? SHALLOW_COMPOUND : CLUSTER_CUTS, this.cuts.since(now - 1000) + 1);
    this.cuts.add(now);
    const measured = this.accepted.since(now - 1000);
    const to = this.rate * this.backoff ** recentCuts;
    this.cut(to, Math.max(to / this.backoff, Math.min(this.sustainedRate(now), measured)) * PLATEAU_LEVEL);
    // Still refused after cuts that took the pace to a fraction of what it was a second ago: the
    // ceiling fell (or another client shares the key, or a fixed window's count ran out). Everyone
    // waits out the Retry-After, and goes on near what the service accepted meanwhile.
    if (recentCuts >= CLUSTER_CUTS && !shallow) {
      this.pause(now, retryAfterSeconds);
      this.cut(Math.max(this.rate, MEASURED_FLOOR * measured), Math.max(this.plateauRate, measured * PLATEAU_LEVEL));
    }
    this.lastDecrease = now;
    this.lastGrowth = now;
  }

  /**
   * Sets the pace, and CUBIC's curve back up to `plateau`: just under the pace that was refused, or
   * after cuts that compounded, just under the pace one step up or what the service accepted over
   * the last second, whichever is higher (not the pace before them all, which was over the ceiling).
   */
  private cut(to: number, plateau: number): void {
    this.rate = Math.max(1, to);
    this.from = this.rate;
    this.plateauRate = Math.max(this.rate, plateau);
    this.sinceDecrease = 0;
    this.kick();
  }
}
