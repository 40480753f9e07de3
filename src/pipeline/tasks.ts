/**
 * The tasks in flight: every match and enrich of a run, with a bound on queued matches so a
 * million-row input never has a million promises waiting. A task that throws (the store cannot
 * be written) is kept as the run's failure and stops the rest through `onFailure`.
 */
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

  /**
   * Nothing when fewer than `limit` matches are queued, or the signal stopped the run; else what
   * resolves once that is so. Nothing to await in the usual case: the loop that queues every
   * match of a run does not yield a turn per match for a promise already settled.
   */
  room(limit: () => number, signal: AbortSignal): Promise<void> | undefined {
    return this.full(limit()) && !signal.aborted ? this.roomLater(limit, signal) : undefined;
  }

  /** A match starts (true) or ends (false) waiting out a retry's backoff. */
  rest(on: boolean): void {
    this.resting += on ? 1 : -1;
    if (on) this.notify();
  }

  /**
   * Whether `limit` matches are queued or in flight. Those resting hold no slot and do not count,
   * up to three times `limit` of them (the cap keeps an outage's retries from queueing the whole
   * input): counted, they left `--concurrency` plus 32 slots short of work when many
   * answers failed (a review measured 14% slower against a service failing a fifth of them at
   * `--concurrency 64`; a second set found 31 to 33 s either way).
   */
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
