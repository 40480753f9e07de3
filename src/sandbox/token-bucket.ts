/** What a rate gate answers: go, or how many whole seconds until a request would pass. */
export type Admission = { ok: true } | { ok: false; retryAfterSeconds: number };

/** A per-key rate limit: every request that passes authentication asks it once (spec 8.1). */
export interface RateGate {
  take(nowMs: number): Admission;
}

/**
 * A per-key token bucket (`rate` a second, at most `capacity`); every authenticated request takes one, free matches too (spec 8.1).
 * `tickMs` coarsens its clock as many gateways' is: requests within a tick look simultaneous, one just after a tick up to a tick early.
 */
export class TokenBucket implements RateGate {
  private tokens: number;
  private updatedAt: number;

  constructor(
    private readonly rate: number,
    private readonly capacity: number,
    now: number,
    private readonly tickMs = 0,
  ) {
    this.tokens = capacity;
    this.updatedAt = this.seen(now);
  }

  private seen(nowMs: number): number {
    return this.tickMs > 0 ? Math.floor(nowMs / this.tickMs) * this.tickMs : nowMs;
  }

  /** Takes a token at time `nowMs`, or says how many whole seconds until one is available. */
  take(nowMs: number): Admission {
    const now = this.seen(nowMs);
    const elapsed = Math.max(0, now - this.updatedAt) / 1000;
    this.tokens = Math.min(this.capacity, this.tokens + elapsed * this.rate);
    this.updatedAt = Math.max(this.updatedAt, now);
    // A token refilled in steps (0.9 + 0.1) may sum to a hair under 1 in floating point.
    if (this.tokens >= 1 - 1e-9) {
      this.tokens = Math.max(0, this.tokens - 1);
      return { ok: true };
    }
    // Retry-After is in whole seconds (spec 7); round up so a client that waits it out succeeds.
    return { ok: false, retryAfterSeconds: Math.max(1, Math.ceil((1 - this.tokens) / this.rate)) };
  }
}

/** A fixed-window gateway: at most `limit` per `windowMs`, reset at each boundary, so up to twice `limit` pass around a boundary however evenly paced. */
export class FixedWindow implements RateGate {
  private window = Number.NEGATIVE_INFINITY;
  private count = 0;

  constructor(
    private readonly limit: number,
    private readonly windowMs: number,
  ) {}

  take(nowMs: number): Admission {
    const window = Math.floor(nowMs / this.windowMs);
    if (window > this.window) {
      this.window = window;
      this.count = 0;
    }
    if (this.count < this.limit) {
      this.count++;
      return { ok: true };
    }
    const untilNext = (window + 1) * this.windowMs - nowMs;
    return { ok: false, retryAfterSeconds: Math.max(1, Math.ceil(untilNext / 1000)) };
  }
}
