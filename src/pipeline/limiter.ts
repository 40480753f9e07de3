import type { Clock } from './clock.js';

export interface LimiterOptions {
  clock: Clock;
  /** Start unpaced (the ceiling is unknown until a 429 reveals it) unless told a rate. */
  initialRate?: number;
  /** Fraction of the measured ceiling to pace at after a 429. */
  backoff?: number;
  /** Additive increase, as a fraction of the rate, per second of clean saturated running. */
  probe?: number;
}

/**
 * Paces requests to a rate it learns from the service, shared by every worker:
 *
 * - A 429 pauses everyone until its Retry-After (one shared pause, not one per worker), and sets
 *   the pace just under the rate the service actually accepted over the last few seconds, which
 *   is the ceiling we were pushing against.
 * - While requests queue for the pacer (we are the bottleneck, not the input), the pace creeps
 *   up additively, probing for headroom; one 429 ends the probe.
 * - Slots are handed out one interval apart, so the end of a pause releases callers at the
 *   learned pace instead of all at once.
 */
export class AdaptiveLimiter {
  rate: number;
  pausedUntil = 0;
  private nextSlot = 0;
  private lastDecrease = Number.NEGATIVE_INFINITY;
  private lastIncrease = 0;
  private waiting = 0;
  private readonly accepted: Float64Array = new Float64Array(1024);
  private acceptedCount = 0;
  private readonly backoff: number;
  private readonly probe: number;

  constructor(private readonly options: LimiterOptions) {
    this.rate = options.initialRate ?? Number.POSITIVE_INFINITY;
    this.backoff = options.backoff ?? 0.97;
    this.probe = options.probe ?? 0.02;
  }

  /** Waits for this caller's slot: after any pause, one pacing interval after the previous slot. */
  async acquire(signal?: AbortSignal): Promise<void> {
    const { clock } = this.options;
    for (;;) {
      const now = clock.now();
      const paced = Number.isFinite(this.rate);
      const slot = Math.max(now, this.pausedUntil, paced ? this.nextSlot : 0);
      if (paced) this.nextSlot = slot + 1000 / this.rate;
      if (slot <= now) return;
      this.waiting++;
      try {
        await clock.sleep(slot - now, signal);
      } finally {
        this.waiting--;
      }
      // A pause that began while we slept outranks the slot we had.
      if (clock.now() >= this.pausedUntil) return;
    }
  }

  /** A request sent at `sentAt` was accepted (any answer but 429). */
  onAccepted(sentAt: number): void {
    const now = this.options.clock.now();
    this.accepted[this.acceptedCount++ % this.accepted.length] = now;
    if (!Number.isFinite(this.rate) || this.waiting === 0 || sentAt < this.lastDecrease) return;
    // Probe: +probe*rate per second, applied in small steps as answers arrive.
    const elapsed = Math.min(1000, now - this.lastIncrease);
    if (elapsed >= 100) {
      this.rate += this.rate * this.probe * (elapsed / 1000);
      this.lastIncrease = now;
    }
  }

  /** A request sent at `sentAt` was answered 429 with this Retry-After. */
  onRateLimited(sentAt: number, retryAfterSeconds: number): void {
    const now = this.options.clock.now();
    this.pausedUntil = Math.max(this.pausedUntil, now + retryAfterSeconds * 1000);
    // Several requests of one burst come back 429 together: decrease once per episode.
    if (sentAt < this.lastDecrease) return;
    const measured = this.acceptedRate(now, 2000);
    const base = Number.isFinite(this.rate) ? Math.min(this.rate, measured ?? this.rate) : (measured ?? 1);
    this.rate = Math.max(0.5, base * this.backoff);
    this.lastDecrease = now;
    this.lastIncrease = now;
  }

  /** Accepted requests a second over the last `windowMs`, or null with too little data. */
  private acceptedRate(now: number, windowMs: number): number | null {
    const n = Math.min(this.acceptedCount, this.accepted.length);
    let count = 0;
    let oldest = now;
    for (let i = 0; i < n; i++) {
      const t = this.accepted[i] as number;
      if (now - t <= windowMs) {
        count++;
        if (t < oldest) oldest = t;
      }
    }
    if (count < 5) return null;
    const span = Math.max(250, now - oldest);
    return (count * 1000) / span;
  }
}
