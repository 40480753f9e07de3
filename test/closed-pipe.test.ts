import { spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../src/sandbox/index.js';
import { csvText, tempDir } from './helpers/cli.js';
import { BIN } from './helpers/spawn.js';
import { baseEnv } from './helpers/setup.js';

/**
 * A reader that stops reading (`enrich ledger export | head -1`, `enrich x.csv | head`) is not a
 * failure to explain: the CLI stops without a word, exit 141 (as a program ended by SIGPIPE), as
 * rg and qsv do. The outputs here are far larger than a pipe's buffer, and the reader goes away
 * after the first chunk, so the writer must meet the closed pipe whatever the machine's speed.
 */
const KEY = 'sk_test_closed_pipe';
let sb: Sandbox;
let dir: ReturnType<typeof tempDir>;
let store: string;
let input: string;

beforeAll(async () => {
  sb = await startSandbox({ keys: [{ key: KEY }], balance: 100_000 });
  dir = tempDir();
  store = dir.file('store.db');
  const domains = [...sb.directory].slice(0, 800).map((c) => [c.domain]);
  // Each domain ten times over: results of a few MB.
  input = dir.file('in.csv', csvText([['domain'], ...Array.from({ length: 10 }, () => domains).flat()]));
});
afterAll(async () => {
  await sb.close();
  dir.cleanup();
});

/** Runs the CLI with its stdout read until the first chunk, then closed. */
function closedAfterFirstChunk(args: string[]): Promise<{ code: number; stderr: string }> {
  const child = spawn(process.execPath, [BIN, ...args], {
    env: { ...baseEnv(), ENRICH_BASE_URL: sb.url, ENRICH_API_KEY: KEY },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  child.stdout.once('data', () => child.stdout.destroy());
  return new Promise((resolve) => child.on('exit', (code) => resolve({ code: code ?? -1, stderr })));
}

describe('a closed pipe', () => {
  it('stops a batch writing to stdout quietly, exit 141; what it bought is kept', async () => {
    const r = await closedAfterFirstChunk([input, '--store', store, '--quiet']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(141);
    expect(sb.ledger(KEY)).toHaveLength(800);
  });

  it('stops `ledger export` quietly, exit 141, in CSV and in JSONL', async () => {
    for (const format of ['csv', 'jsonl']) {
      const r = await closedAfterFirstChunk(['ledger', 'export', '--store', store, '--format', format]);
      expect(r.stderr).toBe('');
      expect(r.code).toBe(141);
    }
  });
});
