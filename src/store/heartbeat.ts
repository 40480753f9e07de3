import { monotonicMs } from '../pipeline/clock.js';

/** How often a run renews its lease on the claims it holds. */
export const HEARTBEAT_MS = 10_000;

/** The two clocks a lapse is judged on. */
export interface LeaseClocks {
  /** Wall-clock ms: it counts a suspended machine's sleep, which other hosts see as silence. */
  now: () => number;
  /** Steady ms: it counts a stalled process even if the wall clock was set back. */
  monotonic?: () => number;
}

/**
 * A run's lease on its claims, renewed every HEARTBEAT_MS; other hosts take the claims over once it lapses. A lapse is
 * taken when either clock says so: a false one costs a re-claim, a missed one (a slept laptop) could send a key another
 * run already replaced. No run (ledger, imports): `write` null, and nothing lapses.
 */
export class Heartbeat {
  /** Lapses so far: a claim made before the last one is no longer this run's to send under, even once the lease is fresh again. */
  epoch = 0;
  private timer: NodeJS.Timeout | null = null;
  private readonly monotonic: () => number;
  private beatAt: { wall: number; steady: number };

  constructor(
    private readonly write: (() => unknown) | null,
    private readonly leaseMs: number,
    private readonly clocks: LeaseClocks,
    /** What a renew that could not be written rejects with (the store's own failure). */
    private readonly failed: (error: unknown) => unknown = (error) => error,
  ) {
    this.monotonic = clocks.monotonic ?? monotonicMs;
    this.beatAt = this.readClocks();
  }

  start(): void {
    if (this.write === null || this.timer !== null) return;
    this.beatAt = this.readClocks();
    this.timer = setInterval(() => void this.beat().catch(() => {}), HEARTBEAT_MS);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }

  /** Whether another host may have taken this run's claims over: it must renew and claim again before sending. Beats at once if so. */
  lapsed(): boolean {
    if (this.write === null || !this.gapTo(this.readClocks())) return false;
    void this.beat().catch(() => {});
    return true;
  }

  /** Whether `at` is further from the last beat than a lease allows, on either clock. */
  private gapTo(at: { wall: number; steady: number }): boolean {
    const within = this.leaseMs - HEARTBEAT_MS;
    return at.steady - this.beatAt.steady > within || at.wall - this.beatAt.wall > within;
  }

  /** Renews the lease now (joining a beat already on its way); rejects with `failed` if the store cannot be written. */
  renew(): Promise<void> {
    return this.beat().catch((error: unknown) => {
      throw this.failed(error);
    });
  }

  private readClocks(): { wall: number; steady: number } {
    return { wall: this.clocks.now(), steady: this.monotonic() };
  }

  /** The beat on its way, if one is: one at a time, however often a lapse is asked about. */
  private beating: Promise<void> | null = null;

  /** Dated when sent, so a late answer cannot make the lease look fresher than the row others read; a synchronous write (SQLite) counts at once. */
  private beat(): Promise<void> {
    const write = this.write;
    if (write === null) return Promise.resolve();
    if (this.beating !== null) return this.beating;
    const sentAt = this.readClocks();
    const landed = (): void => {
      // Others saw the last beat until this one landed: a gap up to the landing counts, though the beat is dated when sent.
      if (this.gapTo(sentAt) || this.gapTo(this.readClocks())) this.epoch++;
      this.beatAt = sentAt;
    };
    let written: unknown;
    try {
      written = write();
    } catch (error) {
      return Promise.reject(error);
    }
    if (!(written instanceof Promise)) {
      landed();
      return Promise.resolve();
    }
    const beating = written.then(landed).finally(() => {
      this.beating = null;
    });
    this.beating = beating;
    return beating;
  }
}
