/**
 * Counters the pipeline bumps and the UI reads on its own timer: the hot path never waits on a
 * terminal, and a plain object costs nothing to update.
 */
export class Progress {
  phase: 'scan' | 'match' | 'write' | 'done' = 'scan';
  rows = 0;
  matchTotal = 0;
  matchDone = 0;
  enrichTotal = 0;
  enrichDone = 0;
  credits = 0;
  retries = 0;
  /** Monotonic ms until which a 429 holds every request back (0: not paused). */
  pausedUntil = 0;
}
