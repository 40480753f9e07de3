/**
 * A per-key token bucket: `rate` tokens a second, holding at most `capacity`. Every request that
 * passes authentication takes one token, free match calls included (spec 8.1).
 */
export class TokenBucket {
  private tokens: number;
  private updatedAt: number;

  constructor(
    private readonly rate: number,
    private readonly capacity: number,
    now: number,
  ) {
    this.tokens = capacity;
    this.updatedAt = now;
  }

  /** Takes a token at time `nowMs`, or says how many whole seconds until one is available. */
  take(nowMs: number): { ok: true } | { ok: false; retryAfterSeconds: number } {
    const elapsed = Math.max(0, nowMs - this.updatedAt) / 1000;
    this.tokens = Math.min(this.capacity, this.tokens + elapsed * this.rate);
    this.updatedAt = nowMs;
    if (this.tokens >= 1) {
      this.tokens -= 1;
      return { ok: true };
    }
    // Retry-After is in whole seconds (spec 7); round up so a client that waits it out succeeds.
    return { ok: false, retryAfterSeconds: Math.max(1, Math.ceil((1 - this.tokens) / this.rate)) };
  }
}
