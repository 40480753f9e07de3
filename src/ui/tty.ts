import { MultiBar, type SingleBar } from 'cli-progress';
import ora, { type Ora } from 'ora';
import type { Progress } from '../pipeline/progress.js';
import { duration, num } from './format.js';
import type { Reporter } from './reporter.js';

export interface TtyOptions {
  stream: NodeJS.WritableStream & { columns?: number };
  now: () => number;
  /**
   * Results go to this terminal too (`enrich x.csv` with no -o): the display stops before the
   * output starts, so the two never interleave.
   */
  outputToTerminal: boolean;
}

interface Rate {
  at: number;
  done: number;
  perSecond: number;
}

/** Smoothed items per second, from successive samples of a counter. */
function rate(previous: Rate | undefined, done: number, now: number): Rate {
  if (previous === undefined) return { at: now, done, perSecond: 0 };
  const dt = (now - previous.at) / 1000;
  if (dt < 0.5) return previous;
  const instant = (done - previous.done) / dt;
  return { at: now, done, perSecond: previous.perSecond === 0 ? instant : previous.perSecond * 0.7 + instant * 0.3 };
}

const eta = (left: number, perSecond: number): string => (perSecond > 0 && left > 0 ? duration((left / perSecond) * 1000) : '–');

/**
 * For a person at a terminal: a spinner while the input is read and the store consulted, then
 * a bar per phase with counts, rate, ETA and credits, a 429 wait shown as a pause (never a
 * freeze), all on stderr, redrawn ten times a second from the pipeline's counters.
 */
export function ttyReporter(options: TtyOptions): Reporter {
  const { stream, now } = options;
  let spinner: Ora | undefined;
  let bars: MultiBar | undefined;
  let matchBar: SingleBar | undefined;
  let enrichBar: SingleBar | undefined;
  let timer: NodeJS.Timeout | undefined;
  let matchRate: Rate | undefined;
  let enrichRate: Rate | undefined;
  let matchingSince = 0;
  let current: Progress | undefined;

  const stopSpinner = (): void => {
    spinner?.stop();
    spinner = undefined;
  };
  const stopBars = (): void => {
    bars?.stop();
    bars = undefined;
    matchBar = enrichBar = undefined;
  };

  const startBars = (p: Progress): void => {
    stopSpinner();
    const width = Math.max(10, Math.min(30, (stream.columns || 80) - 70));
    bars = new MultiBar(
      {
        stream,
        format: ' {label} {bar} {value}/{total} · {extra}',
        barsize: width,
        barCompleteChar: '█',
        barIncompleteChar: '░',
        hideCursor: true,
        clearOnComplete: true,
        gracefulExit: false,
        linewrap: false,
        fps: 10,
        formatValue: (v, _options, type) => (type === 'value' || type === 'total' ? num(v) : String(v)),
      },
      undefined,
    );
    matchBar = bars.create(Math.max(1, p.matchTotal), p.matchDone, { label: 'matching ', extra: '' });
    if (p.enrichTotal > 0 || p.matchTotal > 0) enrichBar = bars.create(Math.max(1, p.enrichTotal), p.enrichDone, { label: 'enriching', extra: '' });
  };

  const render = (p: Progress): void => {
    const t = now();
    switch (p.phase) {
      case 'scan':
        if (spinner !== undefined) spinner.text = p.rows > 0 ? `reading input: ${num(p.rows)} rows` : 'reading input';
        return;
      case 'match': {
        if (bars === undefined) {
          // The spinner covers the first moments, until there is a rate worth showing.
          matchingSince ||= t;
          if (t - matchingSince < 1000 && p.matchDone === 0 && p.enrichDone === 0) {
            if (spinner !== undefined) spinner.text = `matching ${num(p.matchTotal)} domains`;
            return;
          }
          startBars(p);
        }
        matchRate = rate(matchRate, p.matchDone, t);
        enrichRate = rate(enrichRate, p.enrichDone, t);
        const paused = p.pausedUntil > t ? `paused ${duration(p.pausedUntil - t)} (rate limited)` : '';
        matchBar?.setTotal(Math.max(1, p.matchTotal));
        matchBar?.update(p.matchDone, {
          extra: paused !== '' ? paused : p.matchDone >= p.matchTotal ? 'done' : `${num(Math.round(matchRate.perSecond))}/s · ETA ${eta(p.matchTotal - p.matchDone, matchRate.perSecond)}`,
        });
        enrichBar?.setTotal(Math.max(1, p.enrichTotal));
        enrichBar?.update(p.enrichDone, {
          extra: `${num(p.credits)} credits${p.enrichTotal > p.enrichDone ? ` · ${num(Math.round(enrichRate.perSecond))}/s` : ''}${p.retries > 0 ? ` · ${num(p.retries)} retries` : ''}`,
        });
        return;
      }
      case 'write':
        stopBars();
        if (options.outputToTerminal) stopSpinner();
        else if (spinner === undefined) spinner = ora({ stream, text: 'writing results', discardStdin: false, hideCursor: true }).start();
        return;
      case 'done':
        stopBars();
        stopSpinner();
        return;
    }
  };

  /** Prints a line above the live display without tearing it. */
  const print = (line: string): void => {
    if (bars !== undefined) {
      bars.log(`${line}\n`);
      return;
    }
    if (spinner !== undefined) {
      spinner.clear();
      stream.write(`${line}\n`);
      spinner.render();
      return;
    }
    stream.write(`${line}\n`);
  };

  return {
    begin(progress) {
      current = progress;
      spinner = ora({ stream, text: 'reading input', discardStdin: false, hideCursor: true }).start();
      timer = setInterval(() => render(progress), 100);
      timer.unref();
    },
    refresh() {
      if (current !== undefined) render(current);
    },
    note: (message) => print(`enrich: ${message}`),
    warn: (message) => print(`enrich: ${message}`),
    end() {
      if (timer !== undefined) clearInterval(timer);
      timer = undefined;
      stopBars();
      stopSpinner();
    },
  };
}
