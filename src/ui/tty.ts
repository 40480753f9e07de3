import ora, { type Ora } from 'ora';
import type { Progress } from '../pipeline/progress.js';
import { count, duration, num, pausedText, waitingText, wrapWords } from './format.js';
import { LiveFrame } from './frame.js';
import { layoutLines, type BarLine } from './layout.js';
import type { Reporter } from './reporter.js';

export interface TtyOptions {
  stream: NodeJS.WritableStream & { columns?: number; on?(event: 'resize', listener: () => void): unknown; off?(event: 'resize', listener: () => void): unknown };
  now: () => number;
  /** Results go to this terminal too (no -o): the display stops before the output starts, so the two never interleave. */
  outputToTerminal: boolean;
  /** NO_COLOR (no-color.org): the spinner is drawn without colour; the display is otherwise the same. */
  noColor?: boolean;
  /** The input is typed here (`enrich -`): no spinner while it is read (it would draw over the typing); the display starts with matching. */
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

/** The enrich total is known only after matching: until then it reads `284+` and the bar is measured against a total projected from the hit rate, never full too early. */
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

/** What the terminal shows: a spinner while the input is read (and results written to a file), then a bar per phase; lines printed above it. */
class LiveDisplay {
  private readonly frame: LiveFrame;
  private spinner: Ora | undefined;
  private matchRate: Rate | undefined;
  private enrichRate: Rate | undefined;
  private matchingSince = 0;

  constructor(private readonly options: TtyOptions) {
    this.frame = new LiveFrame(options.stream);
  }

  get active(): boolean {
    return this.frame.active;
  }

  startSpinner(text: string): void {
    const color = this.options.noColor === true ? { color: false as const } : {};
    this.spinner = ora({ stream: this.options.stream, text, discardStdin: false, hideCursor: true, ...color }).start();
  }

  clear(): void {
    this.frame.clear();
    this.stopSpinner();
  }

  render(p: Progress): void {
    const t = this.options.now();
    switch (p.phase) {
      case 'scan':
        if (this.spinner !== undefined) this.spinner.text = p.rows > 0 ? `reading input: ${num(p.rows)} rows` : 'reading input';
        return;
      case 'match':
        if (!this.frame.active) {
          // The spinner covers the first moments, until there is a rate worth showing.
          this.matchingSince ||= t;
          if (t - this.matchingSince < 1000 && p.matchDone === 0 && p.enrichDone === 0) {
            if (this.spinner !== undefined) this.spinner.text = `matching ${num(p.matchTotal)} domains`;
            return;
          }
          this.stopSpinner();
        }
        this.drawBars(p, t);
        return;
      case 'write':
        this.frame.clear();
        if (this.options.outputToTerminal) this.stopSpinner();
        else if (this.spinner === undefined) this.startSpinner('writing results');
        return;
      case 'done':
        this.clear();
        return;
    }
  }

  /** Prints a line above the live display without tearing it, broken at spaces to fit. */
  print(line: string): void {
    const { stream } = this.options;
    const text = wrapWords(line, (stream.columns || 80) - 1);
    if (this.spinner !== undefined) {
      this.spinner.clear();
      stream.write(`${text}\n`);
      this.spinner.render();
      return;
    }
    this.frame.printAbove(text);
  }

  private stopSpinner(): void {
    this.spinner?.stop();
    this.spinner = undefined;
  }

  private drawBars(p: Progress, t: number): void {
    this.matchRate = rate(this.matchRate, p.matchDone, t);
    this.enrichRate = rate(this.enrichRate, p.enrichDone, t);
    const pause = pausedText(p, t);
    const columns = this.options.stream.columns || 80;
    const lines = [matchLine(p, this.matchRate, p.matchDone < p.matchTotal ? pause : null), enrichLine(p, this.enrichRate, pause)];
    this.frame.draw(layoutLines(lines, columns));
  }
}

/** For a person at a terminal: a spinner, then a bar per phase (counts, rate, ETA, credits; a 429 wait shown as a pause) on stderr, redrawn ten times a second and on resize. */
export function ttyReporter(options: TtyOptions): Reporter {
  const { stream } = options;
  const display = new LiveDisplay(options);
  let timer: NodeJS.Timeout | undefined;
  let current: Progress | undefined;

  const tick = (progress: Progress): void => {
    timer = setInterval(() => display.render(progress), 100);
    timer.unref();
  };
  const stopTicking = (): void => {
    if (timer !== undefined) clearInterval(timer);
    timer = undefined;
  };
  const onResize = (): void => {
    if (current !== undefined && display.active) display.render(current);
  };

  return {
    begin(progress) {
      current = progress;
      if (options.inputFromTerminal !== true) display.startSpinner('reading input');
      tick(progress);
      stream.on?.('resize', onResize);
    },
    refresh() {
      if (current !== undefined) display.render(current);
    },
    note: (message) => display.print(`enrich: ${message}`),
    warn: (message) => display.print(`enrich: ${message}`),
    pause() {
      stopTicking();
      display.clear();
      return () => {
        if (current === undefined || timer !== undefined) return;
        tick(current);
      };
    },
    end() {
      stopTicking();
      stream.off?.('resize', onResize);
      display.clear();
    },
  };
}
