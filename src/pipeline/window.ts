/**
 * The tasks in flight: every match and enrich of a run, with a bound on queued matches so a
 * million-row input never has a million promises waiting. A task that throws (the store cannot
 * be written) is kept as the run's failure and stops the rest through `onFailure`.
 */
export class Window {
  private outstanding = 0;
  private matches = 0;
  private wake: (() => void) | null = null;
  failure: unknown = null;

  constructor(private readonly onFailure: () => void) {}

  track(task: Promise<void>, isMatch: boolean): void {
    this.outstanding++;
    if (isMatch) this.matches++;
    // One reaction per task (a catch and a finally were two promises more, per request).
    task.then(
      () => this.settled(isMatch),
      (error: unknown) => {
        this.failure ??= error;
        this.onFailure();
        this.settled(isMatch);
      },
    );
  }

  /**
   * Nothing when fewer than `limit` matches are queued, or the signal stopped the run; else what
   * resolves once that is so. Nothing to await in the usual case: the loop that queues every
   * match of a run does not yield a turn per match for a promise already settled.
   */
  room(limit: number, signal: AbortSignal): Promise<void> | undefined {
    return this.matches >= limit && !signal.aborted ? this.roomLater(limit, signal) : undefined;
  }

  private async roomLater(limit: number, signal: AbortSignal): Promise<void> {
    while (this.matches >= limit && !signal.aborted) await this.next();
  }

  private settled(isMatch: boolean): void {
    this.outstanding--;
    if (isMatch) this.matches--;
    this.notify();
  }

  /** Resolves once every task has settled. */
  async drain(): Promise<void> {
    while (this.outstanding > 0) await this.next();
  }

  private next(): Promise<void> {
    return new Promise<void>((resolve) => (this.wake = resolve));
  }

  private notify(): void {
    const w = this.wake;
    this.wake = null;
    w?.();
  }
}
