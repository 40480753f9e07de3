import { createHash } from 'node:crypto';
import { homedir } from 'node:os';
import { basename, join } from 'node:path';
import { createClient, createDispatcher, serviceEndpoint, type ServiceClient } from '../api/client.js';
import { DEFAULT_RETRY_POLICY, type RetryPolicy } from '../api/retry.js';
import { InterruptedError } from '../errors.js';
import { detectFormat, readCsv } from '../io/csv-reader.js';
import { resolveInput } from '../io/input.js';
import { openResultWriter, type OutputFormat } from '../io/output.js';
import { openJournal, type Journal } from '../journal/index.js';
import { RecordReader } from '../journal/records.js';
import { systemClock, type Clock } from '../pipeline/clock.js';
import { execute, type Stop } from '../pipeline/execute.js';
import { AdaptiveLimiter } from '../pipeline/limiter.js';
import { Progress } from '../pipeline/progress.js';
import { resultForRow } from '../pipeline/results.js';
import { scanRecords, type ScanResult } from '../pipeline/scan.js';
import { Scheduler } from '../pipeline/scheduler.js';
import { RunState, type Company } from '../pipeline/state.js';
import { emptyTally, summarise, type Summary } from '../pipeline/summary.js';
import { startSandbox, type Sandbox, type SandboxOptions } from '../sandbox/index.js';
import type { Reporter } from '../ui/reporter.js';
import { VERSION } from '../version.js';

export type ServiceTarget = { kind: 'remote'; baseUrl: string; apiKey: string } | { kind: 'sandbox'; options: SandboxOptions };

export interface RunOptions {
  input: string;
  /** A path, or "-" for stdout. */
  output: string;
  format: OutputFormat;
  column: string | undefined;
  dryRun: boolean;
  maxCredits: number | null;
  journal: string | undefined;
  fresh: boolean;
  concurrency: number;
  service: ServiceTarget;
  retry?: RetryPolicy;
  /** After Ctrl-C, how long requests already sent may take to answer. */
  graceMs?: number;
}

export interface RunContext {
  stdin: NodeJS.ReadableStream;
  stdout: NodeJS.WritableStream;
  env: NodeJS.ProcessEnv;
  reporter: Reporter;
  interrupt: AbortSignal;
  clock?: Clock;
  random?: () => number;
  /** Called once the journal is open: the CLI uses it to unlock on a hard exit. */
  onJournal?: (journal: Journal) => void;
}

export interface RunResult {
  summary: Summary;
  stop: Stop | null;
  /** Set when --fresh moved an older journal aside. */
  setAside: string | null;
  resumed: boolean;
}

const EMBEDDED_SERVICE = 'sandbox:embedded';

/**
 * Where the journal lives unless --journal says: beside the input file (so a dry run and the real
 * run share it, whatever -o they use), else beside the output file, else for stdin to stdout in
 * the user's state directory, named by the input's hash so the same piped input resumes.
 */
export function defaultJournalPath(options: { input: string; output: string }, sha256: string, env: NodeJS.ProcessEnv): string {
  if (options.input !== '-') return `${options.input}.enrich-journal`;
  if (options.output !== '-') return `${options.output}.enrich-journal`;
  const stateHome = env['XDG_STATE_HOME'] ?? join(env['HOME'] ?? homedir(), '.local', 'state');
  return join(stateHome, 'enrich', `stdin-${sha256.slice(0, 16)}.enrich-journal`);
}

async function* checked(records: AsyncIterable<string[]>, interrupt: AbortSignal, progress: Progress): AsyncGenerator<string[]> {
  for await (const record of records) {
    if (interrupt.aborted) throw new InterruptedError('interrupted while reading the input; nothing was sent');
    progress.rows++;
    yield record;
  }
}

export async function runBatch(options: RunOptions, ctx: RunContext): Promise<RunResult> {
  const clock = ctx.clock ?? systemClock;
  const random = ctx.random ?? Math.random;
  const progress = new Progress();
  const cleanups: (() => Promise<void> | void)[] = [];
  ctx.reporter.begin(progress);
  try {
    // 1. Read the whole input once: validate, normalise, dedupe. Nothing is sent before this ends.
    const input = await resolveInput(options.input, ctx.stdin);
    cleanups.push(() => input.cleanup());
    const format = await detectFormat(input.path, input.displayName);
    const hash = createHash('sha256');
    const state = new RunState();
    const scan = await scanRecords(
      checked(readCsv(input.path, input.displayName, format, (chunk) => hash.update(chunk)), ctx.interrupt, progress),
      state,
      options.column,
    );
    const sha256 = hash.digest('hex');

    // 2. The journal: refuse one that belongs to other work, replay one that is ours.
    const service = options.service.kind === 'sandbox' ? EMBEDDED_SERVICE : serviceName(options.service.baseUrl);
    const journalPath = options.journal ?? defaultJournalPath(options, sha256, ctx.env);
    const journal = await openJournal(journalPath, {
      identity: {
        input: { sha256, bytes: input.bytes, name: input.fromStdin ? 'stdin' : basename(input.path) },
        column: scan.headerless ? '(no header)' : (scan.header[scan.columnIndex] as string),
        service,
      },
      tool: `enrich/${VERSION}`,
      fresh: options.fresh,
      dryRun: options.dryRun,
      replay: (entry, offset, length) => state.apply(entry, offset, length),
    });
    cleanups.push(() => journal.close());
    ctx.onJournal?.(journal);
    state.startSession();
    if (!journal.created) ctx.reporter.note(`resuming from ${journal.path}`);
    if (journal.tornBytes > 0) ctx.reporter.note(`dropped a torn last line (${journal.tornBytes} bytes) left by an interrupted run`);

    // 3. Ask the service for what is still owed.
    let stop: Stop | null = null;
    for (let d = 0; d < state.domainCount; d++) if (state.needsMatch(d)) progress.matchTotal++;
    const owesEnrich = !options.dryRun && state.companies.some((c) => state.needsEnrich(c));
    if (progress.matchTotal > 0 || owesEnrich) {
      progress.phase = 'match';
      const client = await connect(options, cleanups);
      const limiter = new AdaptiveLimiter({ clock });
      const scheduler = new Scheduler(limiter, clock, options.concurrency);
      const runKey = journal.header.run;
      stop = await execute(
        state,
        {
          dryRun: options.dryRun,
          maxCredits: options.maxCredits,
          retry: options.retry ?? DEFAULT_RETRY_POLICY,
          matchWindow: Math.max(32, options.concurrency * 4),
          graceMs: options.graceMs ?? 10_000,
        },
        {
          client,
          scheduler,
          journal: journal.writer,
          clock,
          random,
          idempotencyKey: (company: Company, version: number) => idempotencyKey(runKey, company.domain, version),
          progress,
        },
        ctx.interrupt,
      );
      await journal.writer.flush();
    }

    // 4. Results, in input order, rebuilt from the state (and so identical after a resume).
    progress.phase = 'write';
    const writeOutput = !options.dryRun && stop?.reason !== 'interrupted' && stop?.reason !== 'auth';
    const tally = writeOutput
      ? await writeResults(options, scan, state, input.path, input.displayName, format, journal.path, stop, ctx)
      : countResults(scan, state, options.dryRun, stop);
    progress.phase = 'done';
    const summary = summarise({
      state,
      tally,
      rows: scan.rows,
      dryRun: options.dryRun,
      stop,
      journal: journal.path,
      output: writeOutput ? options.output : null,
    });
    return { summary, stop, setAside: journal.setAside, resumed: !journal.created };
  } finally {
    ctx.reporter.end();
    for (const cleanup of cleanups.reverse()) await cleanup();
  }
}

/** A stable identity for the service the journal's records came from (not the key: never the key). */
function serviceName(baseUrl: string): string {
  const { origin, prefix } = serviceEndpoint(baseUrl);
  return `${origin}${prefix}`;
}

/**
 * Stable per company within a journal: the run id, the company, and the key version that moves
 * on only after a definitive error answer. The domain is hashed to keep keys short and uniform.
 */
export function idempotencyKey(run: string, domain: string, version: number): string {
  const digest = createHash('sha256').update(domain).digest('hex').slice(0, 24);
  return `enrich-${run}-${digest}-v${version}`;
}

async function connect(options: RunOptions, cleanups: (() => Promise<void> | void)[]): Promise<ServiceClient> {
  let baseUrl: string;
  let apiKey: string;
  if (options.service.kind === 'sandbox') {
    const sandbox: Sandbox = await startSandbox(options.service.options);
    cleanups.push(() => sandbox.close());
    baseUrl = sandbox.url;
    apiKey = sandbox.keys[0] as string;
  } else {
    ({ baseUrl, apiKey } = options.service);
  }
  const dispatcher = createDispatcher(baseUrl, options.concurrency);
  cleanups.push(() => dispatcher.close());
  return createClient({ baseUrl, apiKey, dispatcher, userAgent: `enrich/${VERSION} node/${process.versions.node}` });
}

function countResults(scan: ScanResult, state: RunState, dryRun: boolean, stop: Stop | null): ReturnType<typeof emptyTally> {
  const tally = emptyTally();
  for (let i = 0; i < scan.rows; i++) tally[resultForRow(scan.rowRefs.get(i), state, null, { dryRun, stop }).status]++;
  return tally;
}

async function writeResults(
  options: RunOptions,
  scan: ScanResult,
  state: RunState,
  inputPath: string,
  displayName: string,
  format: Awaited<ReturnType<typeof detectFormat>>,
  journalPath: string,
  stop: Stop | null,
  ctx: RunContext,
): Promise<ReturnType<typeof emptyTally>> {
  const tally = emptyTally();
  const records = new RecordReader(journalPath);
  const writer = await openResultWriter({ destination: options.output, format: options.format, header: scan.header, stdout: ctx.stdout, bom: format.bom });
  let done = false;
  try {
    let row = 0;
    let first = !scan.headerless;
    for await (const record of readCsv(inputPath, displayName, format)) {
      if (first) {
        first = false;
        continue;
      }
      if ((row & 1023) === 0 && ctx.interrupt.aborted) throw new InterruptedError('interrupted while writing results; the journal is complete, run the same command to write them');
      const result = resultForRow(scan.rowRefs.get(row++), state, (ref) => records.read(ref), { dryRun: false, stop });
      tally[result.status]++;
      await writer.write(record, result);
    }
    await writer.finish();
    done = true;
  } finally {
    records.close();
    if (!done) await writer.abort();
  }
  return tally;
}
