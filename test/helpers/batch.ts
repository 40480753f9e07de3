import { join } from 'node:path';
import { PassThrough, Readable } from 'node:stream';
import { runBatch, type RunOptions, type RunResult } from '../../src/commands/run.js';
import type { Reporter } from '../../src/ui/reporter.js';

/**
 * The batch as a function, in this process: a run's options with test defaults (a store in
 * `dir`, results in `dir/out.csv`, quick retries), for tests that look at the result and stop
 * objects rather than at a process's exit code.
 */
export function batchOptions(dir: string, input: string, service: { baseUrl: string; apiKey: string }, extra: Partial<RunOptions> = {}): RunOptions {
  return {
    input,
    output: join(dir, 'out.csv'),
    writesOutput: true,
    format: 'csv',
    column: undefined,
    dryRun: false,
    maxCredits: null,
    store: join(dir, 'store.db'),
    maxAgeMs: null,
    missMaxAgeMs: 86_400_000,
    journal: undefined,
    concurrency: 8,
    service: { kind: 'remote', ...service },
    retry: { maxAttempts: 12, maxRateLimitedAttempts: 40, baseDelayMs: 5, maxDelayMs: 40 },
    ...extra,
  };
}

/** A run that tells nobody anything. */
const SILENT: Reporter = { begin: () => {}, refresh: () => {}, note: () => {}, warn: () => {}, end: () => {} };

export function runQuietBatch(options: RunOptions): Promise<RunResult> {
  return runBatch(options, { stdin: Readable.from([]), stdout: new PassThrough(), env: {}, reporter: SILENT, interrupt: new AbortController().signal });
}
