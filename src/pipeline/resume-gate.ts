/** Keys earlier runs may have been charged under are settled first: new purchases wait until each has its first answer, so a failing idempotency layer charges nothing new. */
export class ResumeGate {
  private readonly waiting: Set<number>;
  private opened: Promise<void>;
  private open: () => void = () => {};

  constructor(resuming: Iterable<number>) {
    this.waiting = new Set(resuming);
    this.opened = new Promise<void>((resolve) => (this.open = resolve));
    if (this.waiting.size === 0) this.open();
  }

  holds(index: number): boolean {
    return this.waiting.has(index);
  }

  /** The company at `index` got its first answer, or is done: one fewer to wait for. */
  arrive(index: number): void {
    if (this.waiting.delete(index) && this.waiting.size === 0) this.open();
  }

  /** Resolves once every resumed company has arrived, or the signal stops the run. */
  wait(signal: AbortSignal): Promise<void> {
    if (this.waiting.size === 0 || signal.aborted) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const done = (): void => {
        signal.removeEventListener('abort', done);
        resolve();
      };
      signal.addEventListener('abort', done, { once: true });
      void this.opened.then(done);
    });
  }
}
