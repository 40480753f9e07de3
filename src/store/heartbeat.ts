import { monotonicMs } from '../pipeline/clock.js';

/** How often a run renews its lease on the claims it holds. */
export const HEARTBEAT_MS = 10_000;

/**
 * A run's lease on its claims, renewed every HEARTBEAT_MS by `write` (each backend writes its
 * runs row its own way). Whether it may have lapsed is judged on this process's steady clock:
 * a paused process or a stalled event loop, not a wall clock that jumped, is what lets it lapse.
 */
export class Heartbeat {
  private timer: NodeJS.Timeout | null = null;
  private lastBeat = monotonicMs();

  constructor(
    private readonly write: () => unknown,
    private readonly leaseMs: number,
  ) {}

  start(): void {
    if (this.timer !== null) return;
    this.lastBeat = monotonicMs();
    this.timer = setInterval(() => void this.beat(), HEARTBEAT_MS);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }

  /**
   * Whether the run went so long without a beat that a run on another host may have taken its
   * claims over: then it must claim again before it sends. Beats at once if so.
   */
  lapsed(): boolean {
    if (monotonicMs() - this.lastBeat <= this.leaseMs - HEARTBEAT_MS) return false;
    void this.beat();
    return true;
  }

  private async beat(): Promise<void> {
    try {
      await this.write();
      this.lastBeat = monotonicMs();
    } catch {
      // busy or unreachable for a moment: the next beat tries again, and a lapsed lease only costs a claim again
    }
  }
}
