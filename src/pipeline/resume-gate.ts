/**
 * Keys that earlier runs may have been charged under are settled before anything new is bought:
 * a new purchase waits until each such company has had its first answer (or is done with), so a
 * service whose idempotency is failing charges nothing new before the old keys are confirmed.
 */
export class ResumeGate {
  private readonly waiting: Set<number>;
  private opened: Promise<void>;
  private open: () => void = () => {};

  constructor(resuming: Iterable<number>) {
    this.waiting = new Set(resuming);
    this.opened = new Promise<void>((resolve) => (this.open = resolve));
    if (this.waiting.size === 0) this.open();
  }

  /** Whether the company at `index` is one the gate waits for. */
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
