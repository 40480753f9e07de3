import ora, { type Ora } from 'ora';
import type { Progress } from '../pipeline/progress.js';
import { count, duration, num, pausedText, waitingText, wrapWords } from './format.js';
import { LiveFrame } from './frame.js';
import { layoutLines, type BarLine } from './layout.js';
import type { Reporter } from './reporter.js';

export interface TtyOptions {
  stream: NodeJS.WritableStream & { columns?: number; on?(event: 'resize', listener: () => void): unknown; off?(event: 'resize', listener: () => void): unknown };
  now: () => number;
  /**
   * Results go to this terminal too (`enrich x.csv` with no -o): the display stops before the
   * output starts, so the two never interleave.
   */
  outputToTerminal: boolean;
  /** NO_COLOR (no-color.org): the spinner is drawn without colour; the display is otherwise the same. */
  noColor?: boolean;
  /**
   * The input is typed at this terminal (`enrich -`): no spinner while it is read, which would
   * draw over what is being typed; the display starts with the matching.
   */
  inputFromTerminal?: boolean;
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
const perSecond = (r: Rate): string => `${num(Math.round(r.perSecond))}/s`;

export function matchLine(p: Progress, r: Rate, pause: string | null): BarLine {
  const done = p.matchDone >= p.matchTotal;
  const extras = pause !== null ? [pause] : done ? ['done'] : [perSecond(r), `ETA ${eta(p.matchTotal - p.matchDone, r.perSecond)}`];
  return { label: 'matching ', counts: `${num(p.matchDone)}/${num(p.matchTotal)}`, fraction: p.matchDone / Math.max(1, p.matchTotal), extras };
}

/**
 * What is left to enrich is known only once matching is done. Until then the total reads
 * `284+` (still growing), and the bar is measured against the total projected from the hit rate
 * so far, so it never reads full while most of the job remains.
 */
export function enrichLine(p: Progress, r: Rate, pause: string | null): BarLine {
  const growing = p.matchDone < p.matchTotal;
  const projected = growing && p.matchDone > 0 ? (p.enrichTotal * p.matchTotal) / p.matchDone : p.enrichTotal;
  const waiting = waitingText(p);
  const extras = [
    ...(pause !== null && !growing ? [pause] : []),
    ...(waiting !== null ? [waiting] : []),
    count(p.credits, 'credit'),
    ...(p.retries > 0 ? [count(p.retries, 'retry', 'retries')] : []),
    ...(p.enrichTotal > p.enrichDone ? [perSecond(r)] : []),
  ];
  return {
    label: 'enriching',
    counts: `${num(p.enrichDone)}/${num(p.enrichTotal)}${growing ? '+' : ''}`,
    fraction: p.enrichDone / Math.max(1, projected, p.enrichTotal),
    extras,
  };
}

/**
 * For a person at a terminal: a spinner while the input is read and the store consulted, then
 * a bar per phase with counts, rate, ETA and credits, a 429 wait shown as a pause (never a
 * freeze), all on stderr, redrawn ten times a second from the pipeline's counters and at once
 * when the terminal is resized.
 */
export function ttyReporter(options: TtyOptions): Reporter {
  const spinnerColor = options.noColor === true ? { color: false as const } : {};
  const { stream, now } = options;
  const frame = new LiveFrame(stream);
  let spinner: Ora | undefined;
  let timer: NodeJS.Timeout | undefined;
  let matchRate: Rate | undefined;
  let enrichRate: Rate | undefined;
  let matchingSince = 0;
  let current: Progress | undefined;

  const stopSpinner = (): void => {
    spinner?.stop();
    spinner = undefined;
  };

  const drawBars = (p: Progress, t: number): void => {
    matchRate = rate(matchRate, p.matchDone, t);
    enrichRate = rate(enrichRate, p.enrichDone, t);
    const pause = pausedText(p, t);
    const columns = stream.columns || 80;
    const lines = [matchLine(p, matchRate, p.matchDone < p.matchTotal ? pause : null), enrichLine(p, enrichRate, pause)];
    frame.draw(layoutLines(lines, columns));
  };

  const render = (p: Progress): void => {
    const t = now();
    switch (p.phase) {
      case 'scan':
        if (spinner !== undefined) spinner.text = p.rows > 0 ? `reading input: ${num(p.rows)} rows` : 'reading input';
        return;
      case 'match':
        if (!frame.active) {
          // The spinner covers the first moments, until there is a rate worth showing.
          matchingSince ||= t;
          if (t - matchingSince < 1000 && p.matchDone === 0 && p.enrichDone === 0) {
            if (spinner !== undefined) spinner.text = `matching ${num(p.matchTotal)} domains`;
            return;
          }
          stopSpinner();
        }
        drawBars(p, t);
        return;
      case 'write':
        frame.clear();
        if (options.outputToTerminal) stopSpinner();
        else if (spinner === undefined) spinner = ora({ stream, text: 'writing results', discardStdin: false, hideCursor: true, ...spinnerColor }).start();
        return;
      case 'done':
        frame.clear();
        stopSpinner();
        return;
    }
  };

  const onResize = (): void => {
    if (current !== undefined && frame.active) render(current);
  };

  /** Prints a line above the live display without tearing it, broken at spaces to fit. */
  const print = (line: string): void => {
    const text = wrapWords(line, (stream.columns || 80) - 1);
    if (spinner !== undefined) {
      spinner.clear();
      stream.write(`${text}\n`);
      spinner.render();
      return;
    }
    frame.printAbove(text);
  };

  return {
    begin(progress) {
      current = progress;
      if (options.inputFromTerminal !== true) spinner = ora({ stream, text: 'reading input', discardStdin: false, hideCursor: true, ...spinnerColor }).start();
      timer = setInterval(() => render(progress), 100);
      timer.unref();
      stream.on?.('resize', onResize);
    },
    refresh() {
      if (current !== undefined) render(current);
    },
    note: (message) => print(`enrich: ${message}`),
    warn: (message) => print(`enrich: ${message}`),
    pause() {
      if (timer !== undefined) clearInterval(timer);
      timer = undefined;
      frame.clear();
      stopSpinner();
      return () => {
        if (current === undefined || timer !== undefined) return;
        const progress = current;
        timer = setInterval(() => render(progress), 100);
        timer.unref();
      };
    },
    end() {
      if (timer !== undefined) clearInterval(timer);
      timer = undefined;
      stream.off?.('resize', onResize);
      frame.clear();
      stopSpinner();
    },
  };
}
