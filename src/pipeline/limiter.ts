import type { Clock } from './clock.js';
import { Queue } from './queue.js';

export interface LimiterOptions {
  clock: Clock;
  /** Start unpaced (the ceiling is unknown until a 429 reveals it) unless told a rate. */
  initialRate?: number;
  /** Fraction of the ceiling to drop to after a 429 (CUBIC's beta). */
  backoff?: number;
  /** Seconds of saturated running to climb back to the last ceiling (CUBIC's K). */
  plateauSeconds?: number;
}

/**
 * Paces requests to a rate it learns from the service, shared by every worker.
 *
 * The service's limit behaves like a token bucket of unknown rate and depth. With a deep bucket a
 * 429's pause costs nothing (the bucket refills while we wait and we spend it after); with a
 * shallow one every pause is lost time. So 429s must be rare, and the pace must sit just under
 * the ceiling most of the time. The shape that does both is TCP CUBIC's:
 *
 * - The first 429 ends the unpaced start. The pace is set from what was accepted in the first
 *   second, then quadruples every second of saturated running (slow start) until a 429 arrives
 *   while paced: that pace is the ceiling, W.
 * - After each 429 the pace drops to beta*W and climbs back along a cubic: fast at first, flat
 *   near W (99% of it, reached after K seconds), then probing beyond it. A higher ceiling is found; a 429
 *   near W starts the next cycle. Time only counts while callers queue for the pacer, so a slow
 *   input never inflates the pace.
 * - Every 429 pauses all callers until its Retry-After (one shared pause), and callers leave the
 *   queue one pacing interval apart, so a pause never ends in a thundering herd.
 */
const PLATEAU_LEVEL = 0.99;

interface Waiter {
  resolve: () => void;
  reject: (reason: unknown) => void;
  signal: AbortSignal | undefined;
  onAbort: (() => void) | undefined;
}

export class AdaptiveLimiter {
  rate: number;
  pausedUntil = 0;
  private lastRelease = Number.NEGATIVE_INFINITY;
  private readonly queue = new Queue<Waiter>();
  private waiting = 0;
  private pumping = false;
  private wakePump: AbortController | null = null;
  private slowStart = true;
  private lastDecrease = Number.NEGATIVE_INFINITY;
  private lastGrowth = 0;
  /** The pace at the last 429 (CUBIC's W_max) and saturated seconds since it. */
  private ceiling = Number.POSITIVE_INFINITY;
  private sinceDecrease = 0;
  private startedAt: number | null = null;
  /** When recent answers arrived: the first estimate of the ceiling. */
  private readonly recent = new Float64Array(4096);
  private recentCount = 0;
  private readonly backoff: number;
  private readonly plateau: number;

  constructor(private readonly options: LimiterOptions) {
    this.rate = options.initialRate ?? Number.POSITIVE_INFINITY;
    this.backoff = options.backoff ?? 0.9;
    this.plateau = options.plateauSeconds ?? 20;
  }

  /** Callers queued for a slot right now: demand beyond the pace. */
  get queued(): number {
    return this.waiting;
  }

  /** The earliest time the next caller may go: after any pause, one interval after the last. */
  private nextAt(): number {
    const paced = Number.isFinite(this.rate) ? this.lastRelease + 1000 / this.rate : 0;
    return Math.max(this.pausedUntil, paced);
  }

  /** Waits for this caller's turn. Callers go in arrival order, one pacing interval apart. */
  acquire(signal?: AbortSignal): Promise<void> {
    const now = this.options.clock.now();
    this.startedAt ??= now;
    if (this.queued === 0 && now >= this.nextAt()) {
      this.lastRelease = now;
      return Promise.resolve();
    }
    return new Promise<void>((resolve, reject) => {
      const waiter: Waiter = { resolve, reject, signal, onAbort: undefined };
      if (signal !== undefined) {
        waiter.onAbort = () => {
          // Left in the array (the pump skips it), but no longer counted as demand. With nobody
          // left, the pump must not sleep out a long pause: that would hold the process open
          // for up to a Retry-After after Ctrl-C.
          this.waiting--;
          if (this.waiting === 0) this.kick();
          reject(signal.reason);
        };
        signal.addEventListener('abort', waiter.onAbort, { once: true });
      }
      this.waiting++;
      this.queue.push(waiter);
      void this.pump();
    });
  }

  /** Re-evaluates the queue now (the pace or the pause changed). */
  private kick(): void {
    this.wakePump?.abort();
  }

  private async pump(): Promise<void> {
    if (this.pumping) return;
    this.pumping = true;
    const { clock } = this.options;
    try {
      for (let waiter = this.queue.peek(); waiter !== undefined; waiter = this.queue.peek()) {
        if (waiter.signal?.aborted === true) {
          this.queue.shift(); // already rejected and uncounted
          continue;
        }
        const now = clock.now();
        const at = this.nextAt();
        if (now < at) {
          this.wakePump = new AbortController();
          try {
            await clock.sleep(at - now, this.wakePump.signal);
          } catch {
            // woken early by a change of pace: compute again
          }
          this.wakePump = null;
          continue;
        }
        this.queue.shift();
        if (waiter.signal !== undefined && waiter.onAbort !== undefined) waiter.signal.removeEventListener('abort', waiter.onAbort);
        this.waiting--;
        // Catch up at most one interval after an idle spell: no banked burst.
        this.lastRelease = Number.isFinite(this.rate) ? Math.max(now - 1000 / this.rate, at) : now;
        if (this.lastRelease < now - 1000) this.lastRelease = now;
        waiter.resolve();
      }
    } finally {
      this.pumping = false;
    }
  }

  /** A request sent at `sentAt` was answered, with anything but 429. */
  onAccepted(sentAt: number): void {
    const now = this.options.clock.now();
    this.recent[this.recentCount++ % this.recent.length] = now;
    const dt = Math.min(1000, now - this.lastGrowth) / 1000;
    // Grow only while callers queue for the pacer (the pace, not the input, is the bottleneck),
    // and not on answers to requests sent before the last decrease.
    if (!Number.isFinite(this.rate) || this.waiting === 0 || sentAt <= this.lastDecrease) {
      this.lastGrowth = now;
      return;
    }
    if (dt < 0.05) return;
    this.lastGrowth = now;
    if (this.slowStart) {
      this.rate *= 4 ** dt;
    } else {
      this.sinceDecrease += dt;
      // CUBIC's curve, with its flat part 1% under the last ceiling: a shallow bucket 429s the
      // moment the pace touches its rate, so the plateau must sit below it, not on it.
      const x = (this.sinceDecrease - this.plateau) / this.plateau;
      this.rate = Math.max(1, this.ceiling * (PLATEAU_LEVEL + (PLATEAU_LEVEL - this.backoff) * x * x * x));
    }
    this.kick();
  }

  private acceptedSince(from: number): number {
    const n = Math.min(this.recentCount, this.recent.length);
    let count = 0;
    for (let i = 0; i < n; i++) if ((this.recent[i] as number) > from) count++;
    return count;
  }

  /** A request sent at `sentAt` was answered 429 with this Retry-After. */
  onRateLimited(sentAt: number, retryAfterSeconds: number): void {
    const now = this.options.clock.now();
    this.pausedUntil = Math.max(this.pausedUntil, now + retryAfterSeconds * 1000);
    this.kick();
    // The requests of one burst come back 429 together: decrease once per episode.
    if (sentAt <= this.lastDecrease) return;
    if (!Number.isFinite(this.rate)) {
      // The first 429 of the run: what was accepted in the first second is the best evidence
      // (a deep bucket lets through about one second's worth); slow start corrects the rest.
      const since = this.startedAt ?? now;
      const seconds = Math.max(1, (now - since) / 1000);
      this.rate = Math.max(1, this.acceptedSince(now - seconds * 1000) / seconds);
    } else {
      this.slowStart = false;
      this.ceiling = this.rate;
      this.sinceDecrease = 0;
      this.rate = Math.max(1, this.ceiling * this.backoff);
    }
    this.lastDecrease = now;
    this.lastGrowth = now;
  }
}
