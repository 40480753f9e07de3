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
