import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough, Readable } from 'node:stream';
import { parse } from 'csv-parse/sync';
import { main, type CliIO } from '../../src/cli/main.js';
import { baseEnv } from './setup.js';

export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

/** The folder in-process runs started in, and how many are under way there (they may overlap). */
let inFolder: { cwd: string; before: string; runs: number } | null = null;

/**
 * Runs the CLI's main() in this process with captured streams: same code path as bin/enrich.cjs.
 * With `cwd`, relative paths are read from that folder, as a process started there would (runs
 * that overlap must share it).
 */
export async function runCli(argv: string[], options: { env?: Record<string, string | undefined>; stdin?: string; cwd?: string } = {}): Promise<CliRun> {
  const { cwd } = options;
  if (cwd === undefined) return runHere(argv, options);
  if (inFolder !== null && inFolder.cwd !== cwd) throw new Error(`runCli: overlapping runs in two folders (${inFolder.cwd}, ${cwd})`);
  inFolder ??= { cwd, before: process.cwd(), runs: 0 };
  inFolder.runs++;
  process.chdir(cwd);
  try {
    return await runHere(argv, options);
  } finally {
    if (--inFolder.runs === 0) {
      process.chdir(inFolder.before);
      inFolder = null;
    }
  }
}

async function runHere(argv: string[], options: { env?: Record<string, string | undefined>; stdin?: string }): Promise<CliRun> {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  stdout.on('data', (c: Buffer) => out.push(c));
  stderr.on('data', (c: Buffer) => err.push(c));
  const io: CliIO = {
    stdin: Readable.from([options.stdin ?? '']),
    stdout,
    stderr,
    env: { ...baseEnv(), ...options.env },
    onSignal: () => () => {},
    hardExit: (code) => {
      throw new Error(`hard exit ${code}`);
    },
  };
  const code = await main(argv, io);
  return { code, stdout: Buffer.concat(out).toString('utf8'), stderr: Buffer.concat(err).toString('utf8') };
}

export function tempDir(prefix = 'enrich-test-'): { path: string; file(name: string, content?: string): string; cleanup(): void } {
  const path = mkdtempSync(join(tmpdir(), prefix));
  return {
    path,
    file(name, content) {
      const p = join(path, name);
      if (content !== undefined) writeFileSync(p, content);
      return p;
    },
    cleanup: () => rmSync(path, { recursive: true, force: true }),
  };
}

export const csvText = (rows: readonly (readonly string[])[]): string =>
  rows.map((r) => r.map((c) => (/[",\r\n]/.test(c) ? `"${c.replace(/"/g, '""')}"` : c)).join(',')).join('\n') + '\n';

export function readCsvFile(path: string): Record<string, string>[] {
  return parse(readFileSync(path), { bom: true, columns: true }) as Record<string, string>[];
}

export function readCsvRows(path: string): string[][] {
  return parse(readFileSync(path), { bom: true }) as string[][];
}
