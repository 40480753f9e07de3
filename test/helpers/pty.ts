import { spawn } from 'node:child_process';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { finalScreen, type Resize } from './screen.js';
import { BIN } from './spawn.js';

/** The CLI running in a pseudo-terminal (util-linux `script`) that a test can type into and resize. */
export interface LiveTerminal {
  output(): string;
  /** What the screen shows now, the resizes so far applied. */
  screen(): string[];
  /** Resolves when the screen (redrawn after `since`, an output offset) satisfies `test`. */
  waitForScreen(test: (screen: string[]) => boolean, since?: number): Promise<string[]>;
  /** Types into the terminal: "\x03" is Ctrl-C. */
  type(text: string): void;
  /** Sets the terminal's width, as a window resize would (the program gets SIGWINCH). */
  resize(columns: number): void;
  /**
   * Resolves once the program has redrawn its frame at the last resize's width (`drawnAtNewWidth`
   * tells such a frame by its text), and moves that resize to where the frame begins. The bytes
   * before it were drawn at the old width, though some reached the test only after it resized (a
   * loaded machine reads late): a screen that took them at the new width would not be the one the
   * program believes it erases.
   */
  redrawn(drawnAtNewWidth: (frame: string) => boolean): Promise<void>;
  readonly resizes: readonly Resize[];
  readonly columns: number;
  exited: Promise<number>;
  /** Ends the run if it is still going (a failed test must not leave it holding a lock). */
  kill(): void;
}

export function liveTerminal(args: string[], env: Record<string, string>, columns: number, ttyFile: string): LiveTerminal {
  const command = `stty cols ${columns} rows 40 2>/dev/null; tty > ${JSON.stringify(ttyFile)}; exec ${JSON.stringify(process.execPath)} ${[BIN, ...args].map((a) => JSON.stringify(a)).join(' ')}`;
  const child = spawn('script', ['-qfec', command, '/dev/null'], {
    env: { PATH: process.env['PATH'], HOME: process.env['HOME'], XDG_CACHE_HOME: process.env['XDG_CACHE_HOME'] ?? '', TERM: 'xterm-256color', ...env },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let output = '';
  let width = columns;
  const resizes: Resize[] = [];
  const listeners = new Set<() => void>();
  const onData = (c: Buffer): void => {
    output += c.toString('utf8');
    for (const l of listeners) l();
  };
  child.stdout.on('data', onData);
  child.stderr.on('data', onData);
  const exited = new Promise<number>((resolve) => child.on('exit', (code) => resolve(code ?? -1)));
  const screen = (upTo = output.length): string[] => finalScreen(output.slice(0, upTo), columns, resizes);
  return {
    output: () => output,
    screen: () => screen(),
    waitForScreen(test, since = 0) {
      return new Promise((resolve, reject) => {
        const check = (): void => {
          if (output.length <= since) return;
          const s = screen();
          if (!test(s)) return;
          listeners.delete(check);
          resolve(s);
        };
        listeners.add(check);
        void exited.then(() => {
          if (!listeners.has(check)) return;
          listeners.delete(check);
          reject(new Error(`exited before the screen showed what was expected; it shows:\n${screen().join('\n')}`));
        });
        check();
      });
    },
    type: (text) => child.stdin.write(text),
    resize(to) {
      // The bytes already read were drawn at the old width; what follows, at the new one.
      resizes.push({ at: output.length, columns: to });
      width = to;
      execFileSync('stty', ['-F', readFileSync(ttyFile, 'utf8').trim(), 'cols', String(to)]);
    },
    redrawn(drawnAtNewWidth) {
      const last = resizes[resizes.length - 1];
      if (last === undefined) return Promise.reject(new Error('no resize to wait for'));
      const since = last.at;
      return new Promise((resolve, reject) => {
        const check = (): void => {
          const at = redrawSince(output, since, drawnAtNewWidth);
          if (at === null) return;
          listeners.delete(check);
          last.at = at;
          resolve();
        };
        listeners.add(check);
        check();
        void exited.then(() => {
          if (!listeners.has(check)) return;
          listeners.delete(check);
          reject(new Error(`the program ended without redrawing at ${last.columns} columns; its output:\n${output}`));
        });
      });
    },
    resizes,
    get columns() {
      return width;
    },
    exited,
    kill: () => {
      if (child.exitCode === null) child.kill('SIGKILL');
    },
  };
}

/** Where each redraw of a frame begins: its erase (ui/frame.ts), a carriage return and an erase of the line. */
const FRAME_START = '\r\x1b[2K';
const ESCAPES = new RegExp(`${String.fromCharCode(27)}\\[[0-9;?]*[A-Za-z]`, 'g');

/**
 * The offset of the first frame begun at or after `since` whose text satisfies `test`; null while
 * there is none. The last frame may still be arriving: `test` must hold of a whole line of it.
 */
function redrawSince(output: string, since: number, test: (frame: string) => boolean): number | null {
  for (let at = output.indexOf(FRAME_START, since); at !== -1; ) {
    const next = output.indexOf(FRAME_START, at + FRAME_START.length);
    if (test(output.slice(at, next === -1 ? undefined : next).replace(ESCAPES, '').replace(/\r/g, ''))) return at;
    at = next;
  }
  return null;
}
