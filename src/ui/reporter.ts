import type { Progress } from '../pipeline/progress.js';

/** How a run talks to the person (or log) watching; never data (stdout is the results'). TTY and plain (pipes, CI, cron) implement it. */
export interface Reporter {
  /** Starts showing `progress`, which the pipeline updates as it goes. */
  begin(progress: Progress): void;
  /** Redraw now: the phase changed. Called before results are written, so a live display is gone before their first byte reaches a terminal. */
  refresh(): void;
  /** A line worth telling: an import, a resume. Suppressed by --quiet. */
  note(message: string): void;
  /** Something the user should act on; shown even with --quiet. */
  warn(message: string): void;
  /** Stops and clears any live display; called before the summary is printed. */
  end(): void;
  /** Clears the live display and stops drawing until the returned function is called (a question is asked). */
  pause?(): () => void;
}

