import type { Progress } from '../pipeline/progress.js';
import { progressLine } from './format.js';
import type { Reporter } from './reporter.js';

export interface PlainOptions {
  stream: NodeJS.WritableStream;
  /** Progress lines at most this often; 0 turns them off (--quiet). */
  intervalMs: number;
  quiet: boolean;
  now: () => number;
  /** Off a terminal (a cron log, CI) each line starts with the UTC time, so a log says when a run stalled, lost its store, or went on. */
  stamped?: () => Date;
}

/** For pipes, CI and cron: no escapes, no redraws, a short progress line every few seconds. */
export function plainReporter(options: PlainOptions): Reporter {
  let timer: NodeJS.Timeout | undefined;
  const write = (line: string): void => {
    const at = options.stamped === undefined ? '' : `${options.stamped().toISOString().slice(0, 19)}Z `;
    options.stream.write(`${at}enrich: ${line}\n`);
  };
  return {
    begin(progress: Progress) {
      if (options.quiet || options.intervalMs <= 0) return;
      timer = setInterval(() => write(progressLine(progress, options.now())), options.intervalMs);
      timer.unref();
    },
    refresh() {},
    note(message) {
      if (!options.quiet) write(message);
    },
    warn(message) {
      write(message);
    },
    end() {
      if (timer !== undefined) clearInterval(timer);
      timer = undefined;
    },
  };
}
