import type { Claim, StoreEvent } from './types.js';

export interface Queued {
  event: StoreEvent;
  durable: boolean;
}

/** What a commit may answer for one event instead of its claim: queue it again, for the next commit. */
export const AGAIN = Symbol('again');

export interface GroupTiming {
  /** Outcomes and lookups gather this long before a commit. */
  batchMs: number;
  /** ... or until this many are queued. */
  batchRows: number;
  /** An intent (a paid call waits on it) gathers only this long. */
  intentGatherMs: number;
}

/** A queued event: an intent with its own settlement; any other event with none (it shares its batch's: Shared). */
interface Pending extends Queued {
  resolve: ((claim: Claim) => void) | null;
  reject: ((error: Error) => void) | null;
}

/** What every non-durable event of one batch is answered with, once the batch is written. */
interface Shared {
  written: Promise<Claim>;
  resolve: (claim: Claim | Promise<Claim>) => void;
  reject: (error: Error) => void;
}

const WRITTEN: Claim = { kind: 'ok' };

function shared(): Shared {
  let resolve: Shared['resolve'] = () => {};
  let reject: Shared['reject'] = () => {};
  const written = new Promise<Claim>((yes, no) => {
    resolve = yes;
    reject = no;
  });
  // Callers need not wait on non-durable events; a failure still surfaces on flush.
  written.catch(() => {});
  return { written, resolve, reject };
}

/**
 * Group commit for every backend: queued events share one commit (one fsync or round trip). Intents gather briefly
 * (a paid call waits), outcomes longer so a commit carries hundreds. After a failed commit, every queued and later
 * event fails with it: nothing is written out of order, and no paid call starts without its intent.
 */
export class GroupCommit {
  private queue: Pending[] = [];
  /** One settlement shared by the queued non-durable events, not one per event (tens of thousands a run). */
  private shared: Shared | null = null;
  private draining: Promise<void> | null = null;
  private hurry: ((delayMs: number) => void) | null = null;
  private flushing = 0;
  private urgentQueued = false;
  failure: Error | null = null;

  constructor(
    /** Writes one batch in one transaction: a claim per event (in order), or AGAIN. */
    private readonly commit: (batch: readonly Queued[]) => Promise<readonly (Claim | typeof AGAIN)[]>,
    /** The error every waiting event fails with when a commit throws. */
    private readonly failed: (error: unknown) => Error,
    private readonly timing: GroupTiming,
  ) {}

  append(event: StoreEvent, durable = false): Promise<Claim> {
    if (this.failure !== null) {
      const failed = Promise.reject(this.failure);
      // Outcomes are not awaited: the failure surfaces on the next intent and on flush.
      failed.catch(() => {});
      return failed;
    }
    let written: Promise<Claim>;
    if (durable) {
      written = new Promise<Claim>((resolve, reject) => this.queue.push({ event, durable, resolve, reject }));
      written.catch(() => {});
      this.urgentQueued = true;
    } else {
      this.queue.push({ event, durable, resolve: null, reject: null });
      written = (this.shared ??= shared()).written;
    }
    if (durable || this.queue.length >= this.timing.batchRows || this.flushing > 0) this.hurry?.(durable ? this.timing.intentGatherMs : 0);
    this.draining ??= this.drain(durable);
    return written;
  }

  /** Fails every queued and later event as a thrown commit would (the store was found unwritable elsewhere); returns the failure. */
  fail(error: unknown): Error {
    if (this.failure === null) {
      this.failure = this.failed(error);
      for (const p of this.queue) p.reject?.(this.failure);
      this.shared?.reject(this.failure);
      this.shared = null;
      this.queue = [];
    }
    return this.failure;
  }

  /** Writes everything queued so far; throws the failure, if a commit failed. */
  async flush(): Promise<void> {
    this.flushing++;
    try {
      this.hurry?.(0);
      if (this.draining !== null) await this.draining;
    } finally {
      this.flushing--;
    }
    if (this.failure !== null) throw this.failure;
  }

  private nextBatch(urgent: boolean): Promise<void> {
    return new Promise<void>((resolve) => {
      let timer = setTimeout(go, urgent ? this.timing.intentGatherMs : this.timing.batchMs);
      function go(): void {
        clearTimeout(timer);
        resolve();
      }
      this.hurry = (delayMs) => {
        this.hurry = null;
        clearTimeout(timer);
        timer = setTimeout(go, delayMs);
      };
    });
  }

  private async drain(urgent: boolean): Promise<void> {
    if (this.flushing === 0) {
      await this.nextBatch(urgent);
      this.hurry = null;
    }
    while (this.failure === null && this.queue.length > 0) {
      const batch = this.queue;
      const together = this.shared;
      this.queue = [];
      this.shared = null;
      this.urgentQueued = false;
      try {
        const claims = await this.commit(batch);
        // One claim per event, or none is trusted: a missing one must never read as "may buy".
        if (claims.length !== batch.length) throw new Error(`the writer answered ${claims.length} claims for ${batch.length} events`);
        const again: Pending[] = [];
        batch.forEach((p, i) => {
          const claim = claims[i] as Claim | typeof AGAIN;
          if (claim === AGAIN) again.push(p);
          else p.resolve?.(claim);
        });
        const againShared = again.some((p) => !p.durable);
        if (again.length > 0 && this.failure !== null) {
          // fail() came while this batch was out: fail what it asks again for, rather than wait on a queue never drained again.
          for (const p of again) p.reject?.(this.failure);
          if (againShared) together?.reject(this.failure);
        } else if (again.length > 0) {
          this.queue = again.concat(this.queue);
          if (again.some((p) => p.durable)) this.urgentQueued = true;
        }
        // A non-durable event queued again settles with the next batch.
        if (this.failure === null || !againShared) together?.resolve(againShared ? (this.shared ??= shared()).written : WRITTEN);
      } catch (error) {
        // A failure fail() already set stands: it is the one every waiting event was told.
        this.failure ??= this.failed(error);
        for (const p of [...batch, ...this.queue]) p.reject?.(this.failure);
        together?.reject(this.failure);
        this.shared?.reject(this.failure);
        this.shared = null;
        this.queue = [];
      }
      // Gather the full time unless an intent waits, the queue is large or a flush asked: many small commits each rewrite every page they touch.
      if (this.queue.length > 0 && !this.urgentQueued && this.queue.length < this.timing.batchRows && this.flushing === 0) {
        await this.nextBatch(false);
        this.hurry = null;
      }
    }
    this.draining = null;
  }
}
