/**
 * --max-credits: a paid call starts only if this invocation would stay within the cap were it and every call in flight charged (lost
 * answers count as charged). While in-flight calls fill the cap callers wait (a miss frees its place); once spent reaches it, all are told no.
 */
export class CreditBudget {
  private spent = 0;
  private reserved = 0;
  private waiters: (() => void)[] = [];

  constructor(private readonly limit: number | null) {}

  get exhausted(): boolean {
    return this.limit !== null && this.spent >= this.limit;
  }

  /** True when a call may start (and holds a place until settle), false when the cap is spent. */
  async acquire(signal: AbortSignal): Promise<boolean> {
    for (;;) {
      if (signal.aborted || this.exhausted) return false;
      if (this.limit === null || this.spent + this.reserved < this.limit) {
        this.reserved++;
        return true;
      }
      await new Promise<void>((resolve) => {
        const done = (): void => {
          signal.removeEventListener('abort', done);
          resolve();
        };
        this.waiters.push(done);
        signal.addEventListener('abort', done, { once: true });
      });
    }
  }

  /** Ends a place with what the call cost (0 for a miss or a call never sent). */
  settle(charged: number): void {
    this.reserved = Math.max(0, this.reserved - 1);
    this.spent += charged;
    const waiters = this.waiters;
    this.waiters = [];
    for (const wake of waiters) wake();
  }
}
