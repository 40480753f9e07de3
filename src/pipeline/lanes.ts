/** The two kinds of request, enriches first: a long match phase never starves spending. */
export type Lane = 'enrich' | 'match';

/**
 * At most `concurrency` tasks running; the waiting ones start in lane order (every enrich before
 * any match), first come first served within a lane. What p-queue did here with two priorities,
 * in its order to the microtask (a task's caller resumes, then the next task starts, a microtask
 * later), so the limiter's seeded simulations are unchanged; without p-queue's per-task id,
 * symbol, running-task map, events and options copy, which were a few percent of a fast run's
 * main thread (and the map's churn kept objects alive into the old generation).
 */
export class LaneQueue {
  private readonly waiting: Record<Lane, (() => void)[]> = { enrich: [], match: [] };
  private running = 0;

  constructor(private limit: number) {}

  /** Tasks running now. */
  get pending(): number {
    return this.running;
  }

  get concurrency(): number {
    return this.limit;
  }

  /** A larger limit starts waiting tasks at once. */
  set concurrency(limit: number) {
    this.limit = limit;
    while (this.startAnother());
  }

  // async, as p-queue's add is: its callers resume after the same number of microtasks.
  async add<T>(lane: Lane, task: () => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const run = async (): Promise<void> => {
        this.running++;
        try {
          resolve(await task());
        } catch (error) {
          reject(error);
        } finally {
          queueMicrotask(() => this.next());
        }
      };
      this.waiting[lane].push(() => void run());
      this.startAnother();
    });
  }

  private next(): void {
    this.running--;
    this.startAnother();
  }

  private startAnother(): boolean {
    if (this.running >= this.limit) return false;
    const job = this.waiting.enrich.shift() ?? this.waiting.match.shift();
    if (job === undefined) return false;
    job();
    return true;
  }
}
