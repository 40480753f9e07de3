/** The run's tasks in flight, with a bound on queued matches (a million rows never means a million promises); a task that throws stops the rest. */
export class Tasks {
  private outstanding = 0;
  private matches = 0;
  /** Matches waiting out a retry's backoff: they hold no slot, and leave room for others (room()). */
  private resting = 0;
  private wake: (() => void) | null = null;
  failure: unknown = null;

  constructor(private readonly onFailure: () => void) {}

  /** Requests the tasks under way may still send: a match and the enrich it may bring, or an enrich. */
  get remaining(): number {
    return this.outstanding + this.matches;
  }

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

  /** Undefined while fewer than `limit` matches are queued (so the queueing loop does not yield per match); else resolves once that is so. */
  room(limit: () => number, signal: AbortSignal): Promise<void> | undefined {
    return this.full(limit()) && !signal.aborted ? this.roomLater(limit, signal) : undefined;
  }

  /** A match starts (true) or ends (false) waiting out a retry's backoff. */
  rest(on: boolean): void {
    this.resting += on ? 1 : -1;
    if (on) this.notify();
  }

  /** Whether `limit` matches are queued or in flight. Resting ones hold no slot and do not count (up to 3x `limit`, so an outage's retries cannot queue the whole input). */
  private full(limit: number): boolean {
    return this.matches - Math.min(this.resting, 3 * limit) >= limit;
  }

  private async roomLater(limit: () => number, signal: AbortSignal): Promise<void> {
    while (this.full(limit()) && !signal.aborted) await this.next();
  }

  private settled(isMatch: boolean): void {
    this.outstanding--;
    if (isMatch) this.matches--;
    this.notify();
  }

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
