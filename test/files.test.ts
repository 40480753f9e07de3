import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { chmodSync, createReadStream, createWriteStream, existsSync, lchownSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../src/sandbox/index.js';
import { readCsvFile, runCli, tempDir } from './helpers/cli.js';
import { BIN } from './helpers/spawn.js';
import { baseEnv } from './helpers/setup.js';
import { openSink, OutputStalledError } from '../src/io/sink.js';

const KEY = 'sk_test_files';
let sb: Sandbox;
let dir: ReturnType<typeof tempDir>;
let known: string;
const env = (): Record<string, string> => ({ ENRICH_BASE_URL: sb.url, ENRICH_API_KEY: KEY });

beforeAll(async () => {
  sb = await startSandbox({ keys: [{ key: KEY }] });
  dir = tempDir();
  known = [...sb.directory][0]?.domain as string;
});
afterAll(async () => {
  await sb.close();
  dir.cleanup();
});

const spoolDir = (): string => join(tmpdir(), `enrich-${process.getuid?.() ?? 0}`);

/**
 * The built CLI reading stdin, held once its paths were checked (its stdin spool appears only
 * then): `between` runs there, then the rest of the input goes in and the run finishes.
 */
async function heldOnStdin(args: string[], env: Record<string, string | undefined>, between: () => void, rest: string): Promise<{ code: number | null; stderr: string }> {
  const child = spawn(process.execPath, [BIN, '-', ...args], { env: { ...baseEnv(), HOME: dir.path, ...env }, stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  child.stdin.write('domain\n');
  const spooling = (): boolean => existsSync(spoolDir()) && readdirSync(spoolDir()).some((n) => n.startsWith(`spool-${child.pid}-`));
  while (!spooling() && child.exitCode === null) await new Promise((r) => setTimeout(r, 5));
  expect(child.exitCode).toBeNull();
  between();
  child.stdin.end(rest);
  const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
  return { code, stderr };
}

describe('inputs that can be read only once', () => {
  it('reads a FIFO by spooling it', async () => {
    const fifo = join(dir.path, 'in.fifo');
    execFileSync('mkfifo', [fifo]);
    // Opening a FIFO for writing waits for its reader: the CLI, below.
    createWriteStream(fifo).end(`domain\n${known}\nnobody-fifo.com\n`);
    const out = dir.file('fifo.csv');
    const run = await runCli([fifo, '-o', out, '--quiet'], { env: env() });
    expect(run.code, run.stderr).toBe(0);
    expect(readCsvFile(out).map((r) => r['enrich_status'])).toStrictEqual(['matched', 'no_match']);
  });

  it('reads process substitution, <(printf ...), as a real shell passes it', async () => {
    const out = dir.file('subst.csv');
    const child = spawn('bash', ['-c', `"${process.execPath}" "${BIN}" <(printf 'domain\\n%s\\n' "${known}") -o "${out}" --quiet`], {
      env: { ...baseEnv(), ...env() },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    expect(code, stderr).toBe(0);
    expect(readCsvFile(out)[0]).toMatchObject({ domain: known, enrich_status: 'matched' });
  });
});

describe('the output', () => {
  it("removes a killed run's unfinished results beside it, and keeps a live run's", async () => {
    const out = dir.file('kept.csv');
    const dead = spawnSync(process.execPath, ['-e', '']).pid as number;
    const [orphan, live] = [`.kept.csv.enrich-tmp-${dead}-ab`, `.kept.csv.enrich-tmp-${process.pid}-cd`].map((n) => dir.file(n, 'half'));
    const run = await runCli([dir.file('in.csv', `domain\n${known}\n`), '-o', out, '--quiet'], { env: env() });
    expect(run.code, run.stderr).toBe(0);
    expect([existsSync(orphan as string), existsSync(live as string)]).toStrictEqual([false, true]);
  });
});

describe('the stdin spool', () => {
  it('is removed after the run, and spools of killed runs (dead pids) go on the next run', async () => {
    const spools = spoolDir();
    mkdirSync(spools, { recursive: true, mode: 0o700 });
    const dead = spawnSync(process.execPath, ['-e', '']).pid as number;
    const orphan = join(spools, `spool-${dead}-deadbeef.csv`);
    writeFileSync(orphan, 'domain\nleft.com\n', { mode: 0o600 });
    const out = dir.file('stdin.csv');
    const run = await runCli(['-', '-o', out, '--quiet'], { env: env(), stdin: `${known}\n` });
    expect(run.code, run.stderr).toBe(0);
    expect(existsSync(orphan)).toBe(false);
    expect(readdirSync(spools).filter((n) => n.startsWith(`spool-${process.pid}-`))).toStrictEqual([]);
    expect(statSync(spools).mode & 0o777).toBe(0o700);
  });

  it('stops a piped input past its limit in one line, exit 2, and leaves no spool behind', async () => {
    const big = `domain\n${`${'x'.repeat(60)}.com\n`.repeat(40_000)}`;
    const run = await runCli(['-', '-o', dir.file('big.csv')], { env: { ...env(), ENRICH_STDIN_LIMIT_MIB: '1' }, stdin: big });
    expect(run.code).toBe(2);
    expect(run.stderr).toBe('enrich: stopped reading stdin at 1 MiB: more than a CSV piped to enrich is taken to be; save it to a regular file and give that (no limit), or raise it with ENRICH_STDIN_LIMIT_MIB\n');
    expect(readdirSync(spoolDir()).filter((n) => n.startsWith(`spool-${process.pid}-`))).toStrictEqual([]);
  });
});

describe.skipIf(!existsSync('/dev/full'))('a full disk', () => {
  it('says the disk is full, not that stdout was closed', async () => {
    const input = dir.file('full.csv', `domain\n${known}\n`);
    const run = await runCli([input, '-o', '/dev/full', '--quiet'], { env: env() });
    expect(run.code).toBe(1);
    expect(run.stderr).toBe('enrich: cannot write /dev/full: the disk is full (ENOSPC); everything bought is kept in the store: free some space and run the same command to write them again\n');
  });
});

describe('an output folder gone once the run has bought', () => {
  // Exit 1, not a usage error: the run was billed.
  it('fails to write the results with exit 1, keeps what it bought, and the rerun buys nothing', async () => {
    const folder = join(dir.path, 'gone');
    mkdirSync(folder);
    const out = join(folder, 'out.csv');
    const store = dir.file('gone.db');
    const companies = [...sb.directory].slice(10, 15).map((c) => c.domain);
    // Once its paths were checked, the folder goes.
    const { code, stderr } = await heldOnStdin(['-o', out, '--store', store, '--quiet'], env(), () => rmSync(folder, { recursive: true }), `${companies.join('\n')}\n`);
    expect(code, stderr).toBe(1);
    expect(stderr).toBe(`enrich: cannot write the results: ${out}: the folder ${folder} does not exist; what was bought is kept in the store: once they can be written there, run the same command (nothing is bought again)\n`);
    // The run's row says what it bought.
    const runs = JSON.parse((await runCli(['ledger', 'runs', '--json', '--store', store])).stdout) as { runs: { status: string; credits: number; bought: number }[] };
    expect(runs.runs[0]).toMatchObject({ status: 'failed', credits: 5, bought: 5 });
    mkdirSync(folder);
    const again = await runCli([dir.file('gone.csv', `domain\n${companies.join('\n')}\n`), '-o', out, '--store', store, '--summary-json', '-', '--quiet'], { env: env() });
    expect(again.code, again.stderr).toBe(0);
    expect(JSON.parse(again.stdout)).toMatchObject({ credits_charged: 0, reused: 5 });
  });
});

// Root plays the other user: only it can make a link owned by someone else.
describe.skipIf(process.getuid?.() !== 0)('a link planted in a folder anyone may write to', () => {
  // The same for --summary-json and an export.
  it("refuses -o through another user's link in a shared sticky folder, its target untouched", async () => {
    const shared = join(dir.path, 'shared');
    mkdirSync(shared);
    chmodSync(shared, 0o1777);
    const victim = join(dir.path, 'precious.txt');
    writeFileSync(victim, 'mine\n');
    const link = join(shared, 'out.csv');
    symlinkSync(victim, link);
    lchownSync(link, 4242, 4242);
    const input = dir.file('planted.csv', 'domain\nnobody-here.com\n');
    const store = dir.file('planted.db');
    expect((await runCli([input, '--sandbox', '-o', dir.file('fine.csv'), '--store', store])).code).toBe(0);
    for (const args of [[input, '--sandbox', '-o', link], [input, '--sandbox', '-o', dir.file('fine.csv'), '--summary-json', link], ['ledger', 'export', '-o', link, '--store', store]]) {
      const run = await runCli(args);
      expect(run.code, run.stderr).toBe(2);
      expect(run.stderr).toContain(`${link} is a link another user made in ${shared}, a folder anyone may write to: enrich does not follow it`);
    }
    expect(readFileSync(victim, 'utf8')).toBe('mine\n');
    // Planted once the run has started (its paths were looked at then): looked at again as the results are written.
    const late = join(shared, 'late.csv');
    // Once its paths were checked, the link is planted.
    const plant = (): void => {
      symlinkSync(victim, late);
      lchownSync(late, 4242, 4242);
    };
    const { code, stderr } = await heldOnStdin(['--sandbox', '-o', late, '--summary-json', join(shared, 'late.json'), '--store', store], {}, plant, 'nobody-here.com\n');
    // Found once the run has worked: a failure to write its results (1), not a usage error (2: nothing billed).
    expect(code, stderr).toBe(1);
    expect(stderr).toContain(`cannot write the results: ${late} is a link another user made in ${shared}`);
    expect(readFileSync(victim, 'utf8')).toBe('mine\n');
    // A link of one's own there is followed as any other.
    lchownSync(link, 0, 0);
    expect((await runCli([input, '--sandbox', '-o', link, '--store', dir.file('own.db')])).code).toBe(0);
    expect(readFileSync(victim, 'utf8')).toContain('enrich_status');
  });
});

// Issue 36: a run blocked on a reader that stopped reading still hears a signal.
describe('a reader that stops reading the results', () => {
  /** 20,000 rows (a few MB of results, far past what a pipe holds), five of them companies. */
  const bigInput = (name: string, length = 20_000): string => {
    const companies = [...sb.directory].slice(40, 45).map((c) => c.domain);
    const rows = Array.from({ length }, (_, i) => `${i < 5 ? companies[i] : `nobody-${i % 300}.example`},${'x'.repeat(60)}`);
    return dir.file(name, `domain,note\n${rows.join('\n')}\n`);
  };

  /** Runs the CLI; once the reader has its first results (and reads no more), SIGTERM. */
  async function termOnceReading(args: string[], reader: (child: ReturnType<typeof spawn>) => Promise<unknown>): Promise<{ code: number | null; stderr: string }> {
    const child = spawn(process.execPath, [BIN, ...args], { env: { ...baseEnv(), HOME: dir.path, ...env() }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr?.on('data', (c: Buffer) => (stderr += c.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    await reader(child);
    child.kill('SIGTERM');
    return { code: await exited, stderr };
  }

  it.each(['-o a FIFO', 'stdout, a pipe'])('writing to %s: SIGTERM stops it with exit 130, what it bought kept', async (what) => {
    const fifo = what === '-o a FIFO';
    const store = dir.file(`stalled-${fifo}.db`);
    const input = bigInput(`stalled-${fifo}.csv`);
    const out = join(dir.path, `stalled-${fifo}.out`);
    if (fifo) execFileSync('mkfifo', [out]);
    // The reader takes what it is first given, then stops reading (never closes).
    const stalled = fifo ? createReadStream(out) : null;
    const { code, stderr } = await termOnceReading([input, '-o', fifo ? out : '-', '--store', store, '--quiet'], (child) => once(stalled ?? (child.stdout as NodeJS.ReadableStream), 'readable'));
    stalled?.destroy();
    expect(code, stderr).toBe(130);
    expect(stderr).toContain('enrich: interrupted while writing results; everything bought is in the store, run the same command to write them\n');
    const again = await runCli([input, '-o', dir.file(`again-${fifo}.csv`), '--store', store, '--summary-json', '-', '--quiet'], { env: env() });
    expect(again.code, again.stderr).toBe(0);
    expect(JSON.parse(again.stdout)).toMatchObject({ credits_charged: 0, reused: 5 });
  });

  it('-o a FIFO no reader ever opens: SIGTERM once every request is answered stops it with exit 130', async () => {
    const out = join(dir.path, 'unread.fifo');
    execFileSync('mkfifo', [out]);
    const input = dir.file('unread.csv', `domain\n${[...sb.directory].slice(50, 53).map((c) => c.domain).join('\n')}\n`);
    const before = sb.stats.requests;
    // Three matches and three purchases; then the run waits for a reader of its results.
    const { code, stderr } = await termOnceReading([input, '-o', out, '--store', dir.file('unread.db'), '--quiet'], async () => {
      while (sb.stats.requests < before + 6) await new Promise((r) => setTimeout(r, 5));
    });
    expect(code, stderr).toBe(130);
    expect(stderr).toMatch(/enrich: interrupted (while waiting for a reader of .*unread\.fifo|while writing results); everything bought is in the store/);
  });

  // A reader still reading gets whole rows: the run stops at a row, never inside one.
  it('a slow reader of stdout (320 KiB/s): SIGTERM ends the results at a whole row', async () => {
    const input = bigInput('slow.csv', 8_000);
    const file = dir.file('slow.out', '');
    // A reader in a process of its own: 16 KiB every 50 ms, into a file, to the end.
    const slow = `const fs = require('fs'); const out = fs.openSync(process.argv[1], 'a'); process.stdin.on('readable', function take() { const c = process.stdin.read(16384); if (c === null) return; fs.writeSync(out, c); process.stdin.off('readable', take); setTimeout(() => { process.stdin.on('readable', take); take(); }, 50); });`;
    const cat = spawn(process.execPath, ['-e', slow, file], { stdio: ['pipe', 'ignore', 'ignore'] });
    const child = spawn(process.execPath, [BIN, input, '-o', '-', '--store', dir.file('slow.db'), '--quiet'], { env: { ...baseEnv(), HOME: dir.path, ...env() }, stdio: ['ignore', cat.stdin, 'pipe'] });
    cat.stdin?.destroy();
    let stderr = '';
    child.stderr?.on('data', (c: Buffer) => (stderr += c.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const catDone = new Promise((resolve) => cat.on('exit', resolve));
    while (statSync(file).size === 0) await new Promise((r) => setTimeout(r, 2));
    child.kill('SIGTERM');
    expect([0, 130], stderr).toContain(await exited);
    await catDone;
    const out = readFileSync(file, 'utf8');
    expect(out.length).toBeGreaterThan(0);
    expect(out.endsWith('\n'), out.slice(-80)).toBe(true);
  });

  // The last bytes sit in the stream's buffer, under its high-water mark: the wait is the end's, not a drain's.
  it('a signal ends the wait for the last bytes a FIFO reader never takes', async () => {
    const fifo = join(dir.path, 'tail.fifo');
    execFileSync('mkfifo', [fifo]);
    // A reader that opens the FIFO and reads nothing: the pipe takes what it holds (16 pages on Linux).
    const reader = spawn('/bin/sh', ['-c', `exec sleep 600 < '${fifo}'`], { stdio: 'ignore' });
    const pipeBytes = 16 * Number(execFileSync('getconf', ['PAGESIZE'], { encoding: 'utf8' }).trim());
    try {
      const interrupt = new AbortController();
      const sink = await openSink(fifo, process.stdout, true, interrupt.signal);
      // What the pipe holds, and 12 KiB more: under the stream's high-water mark, left for the end.
      for (let i = 0; i < pipeBytes / 4096 + 3; i++) await sink.write(Buffer.alloc(4096, 'x'));
      const finished = sink.finish().then(() => 'finished', (e: unknown) => e);
      interrupt.abort();
      expect(await finished).toBeInstanceOf(OutputStalledError);
      await sink.abort();
    } finally {
      reader.kill();
    }
  });
});
