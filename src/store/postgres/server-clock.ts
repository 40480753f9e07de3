/** A reading of the server's clock against this host's. */
export interface ClockReading {
  /** The server's clock minus this host's, at the middle of the round trip (positive: the server is ahead). */
  skewMs: number;
  roundTripMs: number;
}

/** A disagreement past the round trips by more than this is a step of the host's clock, not noise. */
const STEP_MS = 1_000;

/**
 * The server's clock as this process keeps it: the host's wall clock plus the offset of the shortest-round-trip reading. A reading off
 * by more than the round trips allow (the host clock was stepped) replaces it, so stamps follow the server within a heartbeat of a step.
 */
export class ServerClock {
  private offset = 0;
  private roundTrip = Number.POSITIVE_INFINITY;

  constructor(private readonly host: () => number = Date.now) {}

  /** A reading: the server said `serverMs` between `sentAt` and `backAt` (this host's wall clock). */
  observe(serverMs: number, sentAt: number, backAt: number): void {
    // A reading across a step of the host's clock (its answer before its question) says nothing.
    if (!Number.isFinite(serverMs) || backAt < sentAt) return;
    const roundTrip = backAt - sentAt;
    const offset = serverMs - (sentAt + backAt) / 2;
    const stepped = Math.abs(offset - this.offset) > (roundTrip + this.roundTrip) / 2 + STEP_MS;
    if (roundTrip < this.roundTrip || stepped) {
      this.offset = offset;
      this.roundTrip = roundTrip;
    }
  }

  reading(): ClockReading {
    return { skewMs: this.offset, roundTripMs: this.roundTrip };
  }

  now(): number {
    return Math.round(this.host() + this.offset);
  }
}
