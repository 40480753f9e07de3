/** The two kinds of request, enriches first (a long match phase never starves spending) but in a run's end game. */
export type Lane = 'enrich' | 'match';

/**
 * At most `concurrency` tasks running; the waiting ones start in lane order (every enrich before
 * any match; in a run's end game the other way round, within a bound: `matchesFirst`), first come
 * first served within a lane. What p-queue did here with two priorities,
 * in its order to the microtask (a task's caller resumes, then the next task starts, a microtask
 * later), so the limiter's seeded simulations are unchanged; without p-queue's per-task id,
 * symbol, running-task map, events and options copy, which were a few percent of a fast run's
 * main thread (and the map's churn kept objects alive into the old generation).
 */
export class LaneQueue {
  private readonly waiting: Record<Lane, (() => void)[]> = { enrich: [], match: [] };
  /** When each waiting enrich was queued (the clock's ms), oldest first. */
  private readonly enrichSince: number[] = [];
  private running = 0;
  /**
   * The order turned round (a run's end game, execute.ts): matches before enriches, but never an
   * enrich kept waiting longer than this many ms (a service refusing matches must not stop the
   * spending). Null: enriches first, always.
   */
  matchesFirst: number | null = null;

  constructor(
    private limit: number,
    private readonly now: () => number = () => performance.now(),
  ) {}

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
      if (lane === 'enrich') this.enrichSince.push(this.now());
      this.startAnother();
    });
  }

  private next(): void {
    this.running--;
    this.startAnother();
  }

  private startAnother(): boolean {
    if (this.running >= this.limit) return false;
    const { enrich, match } = this.waiting;
    const oldest = this.enrichSince[0];
    const matchNow = match.length > 0 && (enrich.length === 0 || (this.matchesFirst !== null && oldest !== undefined && this.now() - oldest <= this.matchesFirst));
    const job = matchNow ? match.shift() : enrich.shift();
    if (job === undefined) return false;
    if (!matchNow) this.enrichSince.shift();
    job();
    return true;
  }
}
