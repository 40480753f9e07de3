import type { Clock } from './clock.js';
import { Queue } from './queue.js';

/** What the pacer keeps to: set by whoever learns it (limiter.ts), read at every release. */
export interface Pace {
  /** Requests a second; infinite while unpaced. */
  readonly rate: number;
  /** Until when every caller is held (monotonic ms); 0 or past: not paused. */
  readonly pausedUntil: number;
  /**
   * Whether a release that came late may be followed by a short gap (CATCH_UP_MS): only against a
   * bucket known to be deep, which absorbs it. A shallow one refuses any gap under its interval.
   */
  readonly catchUp: boolean;
}

/** Pacing intervals from this long are kept to a fraction of a millisecond (clock.until). */
const PRECISE_FROM_MS = 4;
/**
 * How far behind its schedule the pacer may catch up against a deep bucket (`leave`). Counted from
 * each late release, a pace of 650 a second delivered 410-450 (the bench's 500 req/s row, live: at
 * intervals of 2 ms, Node's timers fire on whole milliseconds, later on a busy event loop).
 */
const CATCH_UP_MS = 5;

interface Waiter {
  resolve: () => void;
  reject: (reason: unknown) => void;
  signal: AbortSignal | undefined;
  onAbort: (() => void) | undefined;
}

/**
 * Releases callers in arrival order, one pacing interval apart, none during a pause: so a pause
 * never ends in a thundering herd. One timer at a time, whatever the number waiting; a change of
 * pace or pause (`kick`) makes it compute again.
 */
export class Pacer {
  /** Callers released so far. */
  released = 0;
  private lastRelease = Number.NEGATIVE_INFINITY;
  private readonly queue = new Queue<Waiter>();
  private waiting = 0;
  private pumping = false;
  private wakePump: AbortController | null = null;

  constructor(
    private readonly clock: Clock,
    private readonly pace: Pace,
  ) {}

  /** Callers queued for a slot right now: demand beyond the pace. */
  get queued(): number {
    return this.waiting;
  }

  /** The earliest time the next caller may go: after any pause, one interval after the last. */
  private nextAt(): number {
    const { rate, pausedUntil } = this.pace;
    return Math.max(pausedUntil, Number.isFinite(rate) ? this.lastRelease + 1000 / rate : 0);
  }

  /** Waits for this caller's turn; rejects with the signal's reason if it aborts first. */
  acquire(signal?: AbortSignal): Promise<void> {
    const now = this.clock.now();
    if (this.waiting === 0 && now >= this.nextAt()) {
      this.leave(now, this.nextAt());
      return Promise.resolve();
    }
    return new Promise<void>((resolve, reject) => {
      const waiter: Waiter = { resolve, reject, signal, onAbort: undefined };
      if (signal !== undefined) {
        waiter.onAbort = () => {
          // Left in the queue (the pump skips it), but no longer counted as demand. With nobody
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
  kick(): void {
    this.wakePump?.abort();
  }

  /**
   * A caller leaves at `now`, its turn having come at `due`. The next interval counts from when it
   * actually left, not when it was due: a timer that fires late must not make the next gap short.
   * Where the pace allows catching up, it counts from when the caller was due, up to CATCH_UP_MS behind.
   */
  private leave(now: number, due: number): void {
    this.lastRelease = this.pace.catchUp ? Math.max(due, now - CATCH_UP_MS) : now;
    this.released++;
  }

  private async pump(): Promise<void> {
    if (this.pumping) return;
    this.pumping = true;
    try {
      for (let waiter = this.queue.peek(); waiter !== undefined; waiter = this.queue.peek()) {
        if (waiter.signal?.aborted === true) {
          this.queue.shift(); // already rejected and uncounted
          continue;
        }
        const now = this.clock.now();
        const at = this.nextAt();
        if (now < at) {
          await this.sleepUntil(now, at);
          continue;
        }
        this.queue.shift();
        if (waiter.signal !== undefined && waiter.onAbort !== undefined) waiter.signal.removeEventListener('abort', waiter.onAbort);
        this.waiting--;
        this.leave(now, at);
        waiter.resolve();
      }
    } finally {
      this.pumping = false;
    }
  }

  /** Sleeps until `at`, or until woken early by a change of pace (then the pump computes again). */
  private async sleepUntil(now: number, at: number): Promise<void> {
    this.wakePump = new AbortController();
    try {
      // To the fraction of a millisecond: a late timer is a longer gap, a lower rate. Not for
      // intervals of a few ms, where the last stretch spent in event-loop turns would be most of
      // a core (a bucket that deep in requests a second is rarely one token deep).
      if (1000 / this.pace.rate >= PRECISE_FROM_MS) await this.clock.until(at, this.wakePump.signal);
      else await this.clock.sleep(at - now, this.wakePump.signal);
    } catch {
      // woken early
    }
    this.wakePump = null;
  }
}
