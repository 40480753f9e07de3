import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, openSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../src/sandbox/index.js';
import { readCsvFile, tempDir } from './helpers/cli.js';
import { hostileServer } from './helpers/hostile.js';
import { BIN } from './helpers/spawn.js';
import { baseEnv } from './helpers/setup.js';

/**
 * Issue 19, item 12: a piped input or a device was spooled without bound (`enrich - < /dev/zero`
 * filled a disk) and SIGTERM did not stop the spooling. Every run here has a TMPDIR of its own, so
 * its spool folder is watched alone; a watchdog kills a run whose spool grows past 256 MiB, so a
 * regression fails the test instead of filling the disk.
 */
const KEY = 'sk_test_spool';
let sb: Sandbox;
let known: string;
beforeAll(async () => {
  sb = await startSandbox({ keys: [{ key: KEY }] });
  known = [...sb.directory][0]?.domain as string;
});
afterAll(async () => sb.close());

let dir: ReturnType<typeof tempDir>;
beforeEach(() => {
  dir = tempDir('enrich-spool-');
});
afterEach(() => dir.cleanup());

const spoolDir = (): string => join(dir.path, `enrich-${process.getuid?.() ?? 0}`);
const spools = (): string[] => (existsSync(spoolDir()) ? readdirSync(spoolDir()).filter((n) => n.startsWith('spool-')) : []);
const spooledBytes = (): number => spools().reduce((sum, n) => sum + (statSync(join(spoolDir(), n), { throwIfNoEntry: false })?.size ?? 0), 0);

interface Run {
  child: ChildProcess;
  exited: Promise<number>;
  stderr(): string;
}

function start(args: string[], stdin: 'pipe' | 'ignore' | number, env: Record<string, string> = {}): Run {
  const child = spawn(process.execPath, [BIN, ...args], {
    env: { ...baseEnv(), TMPDIR: dir.path, ENRICH_BASE_URL: sb.url, ENRICH_API_KEY: KEY, ...env },
    stdio: [stdin, 'ignore', 'pipe'],
  });
  let err = '';
  child.stderr?.on('data', (c: Buffer) => (err += c.toString()));
  child.stdin?.on('error', () => {});
  const watchdog = setInterval(() => {
    if (spooledBytes() > 256 * 1024 * 1024) child.kill('SIGKILL');
  }, 20);
  const exited = new Promise<number>((resolve) =>
    child.on('exit', (code, signal) => {
      clearInterval(watchdog);
      resolve(code ?? (signal === 'SIGKILL' ? 137 : 128));
    }),
  );
  return { child, exited, stderr: () => err };
}

describe('a stream that cannot be CSV is refused at once, its spool removed', () => {
  it('/dev/zero given as a path: exit 2, one line, no spool left', async () => {
    const run = start(['/dev/zero', '-o', dir.file('out.csv'), '--quiet'], 'ignore');
    expect(await run.exited, run.stderr()).toBe(2);
    expect(run.stderr()).toBe('enrich: /dev/zero is not a text file (it contains NUL bytes)\n');
    expect(spools()).toStrictEqual([]);
  });

  it('/dev/zero on stdin: the same', async () => {
    const zero = openSync('/dev/zero', 'r');
    try {
      const run = start(['-', '-o', dir.file('out.csv'), '--quiet'], zero);
      expect(await run.exited, run.stderr()).toBe(2);
      expect(run.stderr()).toBe('enrich: stdin is not a text file (it contains NUL bytes)\n');
      expect(spools()).toStrictEqual([]);
    } finally {
      closeSync(zero);
    }
  });
});

/** Writes `chunk` to the child's stdin until `until()` says stop (or the child has gone); leaves stdin open. */
async function feed(run: Run, chunk: Buffer, until: () => boolean): Promise<void> {
  let gone = false;
  void run.exited.then(() => (gone = true));
  const stdin = run.child.stdin;
  if (stdin === null) throw new Error('no stdin');
  while (!gone && !until()) {
    if (!stdin.write(chunk)) await new Promise((resolve) => (stdin.once('drain', resolve), void run.exited.then(resolve)));
  }
}

describe('signals while spooling', () => {
  // Sent once the spool holds 4 MiB, stdin still open.
  it('SIGTERM while spooling stops reading at once and removes the spool: exit 130', async () => {
    const run = start(['-', '-o', dir.file('out.csv'), '--quiet'], 'pipe');
    await feed(run, Buffer.from(`${known}\n`.repeat(4096)), () => spooledBytes() >= 4 * 1024 * 1024);
    run.child.kill('SIGTERM');
    // The producer neither writes more nor closes the pipe: the read in progress must end by itself.
    expect(await run.exited, run.stderr()).toBe(130);
    expect(run.stderr()).toContain('enrich: interrupted while reading the input; nothing was sent\n');
    expect(spools()).toStrictEqual([]);
    run.child.stdin?.destroy();
  });

  it('a second signal (quit at once) while a request hangs still removes the spool', async () => {
    const server = await hostileServer(() => {
      // never answers
    });
    try {
      const run = start(['-', '-o', dir.file('out.csv'), '--quiet'], 'pipe', { ENRICH_BASE_URL: server.url });
      run.child.stdin?.end(`domain\n${known}\n`);
      while (server.requests === 0) await new Promise((resolve) => setTimeout(resolve, 10));
      expect(spools()).toHaveLength(1);
      run.child.kill('SIGTERM');
      while (!run.stderr().includes('stopping')) await new Promise((resolve) => setTimeout(resolve, 10));
      run.child.kill('SIGTERM');
      expect(await run.exited, run.stderr()).toBe(130);
      expect(run.stderr()).toContain('quit at once');
      expect(spools()).toStrictEqual([]);
    } finally {
      await server.close();
    }
  });
});

describe('a real CSV on stdin', () => {
  // 20 MiB with a 3 MiB line.
  it('spools a big CSV with a very long quoted cell: every row written, the spool removed', async () => {
    const filler = 'x'.repeat(1000);
    const rows = Array.from({ length: 20_000 }, (_, i) => `${i % 2 === 0 ? known : 'nobody-spool.com'},${filler}\n`);
    const long = `${known},"${'y'.repeat(3 * 1024 * 1024)}"\r`;
    const body = Buffer.from(`domain,notes\n${long}${rows.join('')}`);
    const out = dir.file('out.csv');
    const run = start(['-', '-o', out, '--quiet'], 'pipe');
    run.child.stdin?.end(body);
    expect(await run.exited, run.stderr()).toBe(0);
    const written = readCsvFile(out);
    expect(written).toHaveLength(20_001);
    expect(written[0]?.['notes']).toHaveLength(3 * 1024 * 1024);
    expect(written.slice(1, 3).map((r) => r['enrich_status'])).toStrictEqual(['matched', 'no_match']);
    expect(spools()).toStrictEqual([]);
  });
});
