/** What the pipeline reports as it goes: it tells, and never reads or writes a shared object. */
export type ProgressEvent =
  | { type: 'phase'; phase: Phase }
  /** Rows read so far (a total, not an increment: a cached scan reports all at once). */
  | { type: 'rows'; rows: number }
  /** Free matches this run owes, known once the store has been consulted. */
  | { type: 'matches-owed'; count: number }
  | { type: 'matched' }
  /** A company joined the paid queue, and one left it (bought, missed, failed or reused). */
  | { type: 'enrich-queued' }
  | { type: 'enriched' }
  | { type: 'charged'; credits: number }
  | { type: 'retry' }
  /** A 429 holds requests back until this monotonic ms. */
  | { type: 'paused'; until: number }
  /** A company started (+1) or stopped (-1) waiting on another live run holding its purchase; `run` names it ("pid 4242 on build-7"). */
  | { type: 'waiting'; by: 1 | -1; run?: string };

export type Phase = 'scan' | 'match' | 'write' | 'done';
export type ProgressSink = (event: ProgressEvent) => void;

/** The tally the reporters read on their own timer: the hot path never waits on a terminal. */
export class Progress {
  phase: Phase = 'scan';
  rows = 0;
  matchTotal = 0;
  matchDone = 0;
  enrichTotal = 0;
  enrichDone = 0;
  credits = 0;
  retries = 0;
  /** Monotonic ms until which a 429 holds every request back (0: not paused). */
  pausedUntil = 0;
  /** Companies waiting for another run that holds their purchase, and the last such run named. */
  waiting = 0;
  waitingOn = '';

  readonly sink: ProgressSink = (e) => this.apply(e);

  apply(e: ProgressEvent): void {
    switch (e.type) {
      case 'phase':
        this.phase = e.phase;
        return;
      case 'rows':
        this.rows = e.rows;
        return;
      case 'matches-owed':
        this.matchTotal = e.count;
        return;
      case 'matched':
        this.matchDone++;
        return;
      case 'enrich-queued':
        this.enrichTotal++;
        return;
      case 'enriched':
        this.enrichDone++;
        return;
      case 'charged':
        this.credits += e.credits;
        return;
      case 'retry':
        this.retries++;
        return;
      case 'paused':
        this.pausedUntil = Math.max(this.pausedUntil, e.until);
        return;
      case 'waiting':
        this.waiting += e.by;
        if (e.run !== undefined) this.waitingOn = e.run;
        return;
    }
  }
}
