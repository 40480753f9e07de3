import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { baseEnv } from './setup.js';

export const BIN = fileURLToPath(new URL('../../bin/enrich.cjs', import.meta.url));

export interface Spawned {
  child: ChildProcess;
  stdout(): string;
  stderr(): string;
  /** Resolves with the exit code (or 128 + signal number for a signal). */
  exited: Promise<number>;
  /** Resolves once stdout or stderr contains `text`. */
  waitFor(text: string | RegExp, timeoutMs?: number): Promise<void>;
}

const SIGNALS: Record<string, number> = { SIGHUP: 1, SIGINT: 2, SIGKILL: 9, SIGTERM: 15 };

/** Runs the built CLI as its own process, as a user or cron would. */
export function spawnCli(args: string[], options: { env?: Record<string, string | undefined>; stdin?: string; cwd?: string } = {}): Spawned {
  const child = spawn(process.execPath, [BIN, ...args], {
    cwd: options.cwd,
    env: { ...baseEnv(), ...options.env },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  const listeners = new Set<() => void>();
  child.stdout?.on('data', (c: Buffer) => {
    out += c.toString('utf8');
    for (const l of listeners) l();
  });
  child.stderr?.on('data', (c: Buffer) => {
    err += c.toString('utf8');
    for (const l of listeners) l();
  });
  if (options.stdin !== undefined) child.stdin?.end(options.stdin);
  else child.stdin?.end();
  const exited = new Promise<number>((resolve) => {
    child.on('exit', (code, signal) => resolve(code ?? 128 + (SIGNALS[signal ?? ''] ?? 0)));
  });
  return {
    child,
    stdout: () => out,
    stderr: () => err,
    exited,
    waitFor(text, timeoutMs = 15_000) {
      return new Promise((resolve, reject) => {
        const matches = (): boolean => (typeof text === 'string' ? (out + err).includes(text) : text.test(out + err));
        if (matches()) {
          resolve();
          return;
        }
        const timer = setTimeout(() => {
          listeners.delete(check);
          reject(new Error(`timed out waiting for ${String(text)}; got:\n${out}\n${err}`));
        }, timeoutMs);
        const check = (): void => {
          if (!matches()) return;
          clearTimeout(timer);
          listeners.delete(check);
          resolve();
        };
        listeners.add(check);
        void exited.then(() => {
          if (listeners.has(check)) {
            clearTimeout(timer);
            listeners.delete(check);
            if (matches()) resolve();
            else reject(new Error(`exited before ${String(text)}; got:\n${out}\n${err}`));
          }
        });
      });
    },
  };
}

export async function runProcess(args: string[], options: Parameters<typeof spawnCli>[1] = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  const p = spawnCli(args, options);
  const code = await p.exited;
  return { code, stdout: p.stdout(), stderr: p.stderr() };
}
