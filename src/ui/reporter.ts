import type { Progress } from '../pipeline/progress.js';

/**
 * How a run talks to the person (or log) watching it. Data never goes through here: stdout
 * belongs to the results. Implementations: TTY (spinner and bars), plain (a line every few
 * seconds, for pipes, CI and cron; with --quiet only warnings) and silent (tests).
 */
export interface Reporter {
  /** Starts showing `progress`, which the pipeline updates as it goes. */
  begin(progress: Progress): void;
  /**
   * Redraw now, not at the next tick: the phase changed. Called before results are written, so
   * a live display is gone before the first byte reaches a terminal.
   */
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

export const silentReporter: Reporter = {
  begin: () => {},
  refresh: () => {},
  note: () => {},
  warn: () => {},
  end: () => {},
};
