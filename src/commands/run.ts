import { createHash } from 'node:crypto';
import { homedir } from 'node:os';
import { basename, join } from 'node:path';
import type { ServiceClient } from '../api/client.js';
import { serviceEndpoint } from '../api/endpoint.js';
import { DEFAULT_RETRY_POLICY, type RetryPolicy } from '../api/retry.js';
import { InterruptedError } from '../errors.js';
import { detectFormat, readCsv, type CsvBatch, type CsvFormat } from '../io/csv-reader.js';
import { hashFile, resolveInput, type InputSource } from '../io/input.js';
import { loadScan, saveScan, type ScanKey } from '../io/scan-cache.js';
import { copyCsvWithResults, csvResultSuffix, jsonlResultFormatter, writeJsonlResults, type OutputFormat } from '../io/output.js';
import { openSink } from '../io/sink.js';
import { openJournal, type Journal } from '../journal/index.js';
import { RecordReader } from '../journal/records.js';
import { systemClock, type Clock } from '../pipeline/clock.js';
import { execute, type Stop } from '../pipeline/execute.js';
import { AdaptiveLimiter } from '../pipeline/limiter.js';
import { Progress } from '../pipeline/progress.js';
import { resultForRow, resultKey, type RowResult } from '../pipeline/results.js';
import { scanRecords, type ScanResult } from '../pipeline/scan.js';
import { Scheduler } from '../pipeline/scheduler.js';
import { RunState, type Company } from '../pipeline/state.js';
import { emptyTally, summarise, type RowTally, type Summary } from '../pipeline/summary.js';
import type { SandboxOptions } from '../sandbox/index.js';
import type { Reporter } from '../ui/reporter.js';
import { VERSION } from '../version.js';

export type ServiceTarget = { kind: 'remote'; baseUrl: string; apiKey: string } | { kind: 'sandbox'; options: SandboxOptions };

export interface RunOptions {
  input: string;
  /** A path, or "-" for stdout. */
  output: string;
  /** Whether results are written: always for a real run; for a dry run only if asked (-o). */
  writesOutput: boolean;
  format: OutputFormat;
  column: string | undefined;
  dryRun: boolean;
  maxCredits: number | null;
  journal: string | undefined;
  fresh: boolean;
  concurrency: number;
  service: ServiceTarget;
  retry?: RetryPolicy;
  /** Write the service's text as received (no formula neutralising, no control stripping). */
  rawServiceText?: boolean;
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

async function* checked(batches: AsyncIterable<CsvBatch>, interrupt: AbortSignal, progress: Progress): AsyncGenerator<CsvBatch> {
  for await (const batch of batches) {
    if (interrupt.aborted) throw new InterruptedError('interrupted while reading the input; nothing was sent');
    progress.rows += batch.records.length;
    yield batch;
  }
}

type Cleanups = (() => Promise<void> | void)[];

export async function runBatch(options: RunOptions, ctx: RunContext): Promise<RunResult> {
  const progress = new Progress();
  const cleanups: Cleanups = [];
  ctx.reporter.begin(progress);
  let outcome: { ok: true; result: RunResult } | { ok: false; error: unknown };
  try {
    outcome = { ok: true, result: await batch(options, ctx, progress, cleanups) };
  } catch (error) {
    outcome = { ok: false, error };
  }
  ctx.reporter.end();
  // Every cleanup runs (the stdin spool must go even if the journal failed to close); a cleanup's
  // failure is reported only when the run itself did not fail with its own error.
  let cleanupError: unknown;
  for (const cleanup of cleanups.reverse()) {
    try {
      await cleanup();
    } catch (error) {
      cleanupError ??= error;
    }
  }
  if (!outcome.ok) throw outcome.error;
  if (cleanupError !== undefined) throw cleanupError;
  return outcome.result;
}

async function batch(options: RunOptions, ctx: RunContext, progress: Progress, cleanups: Cleanups): Promise<RunResult> {
  const clock = ctx.clock ?? systemClock;
  const random = ctx.random ?? Math.random;
  // 1. Read the whole input once: validate, normalise, dedupe. Nothing is sent before this ends.
  if (options.input === '-' && (ctx.stdin as { isTTY?: boolean }).isTTY === true) {
    ctx.reporter.note('reading CSV from the terminal: paste or type it, then press Ctrl-D');
  }
  const input = await resolveInput(options.input, ctx.stdin);
  cleanups.push(() => input.cleanup());
  const format = await detectFormat(input.path, input.displayName);
  if (!format.utf8) {
    ctx.reporter.warn(
      `${input.displayName} is not UTF-8 (Latin-1 or Windows-1252?): CSV results copy its rows unchanged, but a domain with accents may not match, and JSONL shows such characters as \ufffd; save it as UTF-8 to be sure`,
    );
  }
  const sha256 = await hashFile(input.path);
  // A spooled pipe (stdin, `<(...)`, a FIFO) has no folder of its own to keep a journal beside.
  const journalPath = options.journal ?? defaultJournalPath({ input: input.fromStdin ? '-' : options.input, output: options.output }, sha256, ctx.env);
  const state = new RunState();
  const scanKey: ScanKey = { tool: VERSION, sha256, bytes: input.bytes, column: options.column ?? null, format };
  const cachePath = `${journalPath}.scan`;
  let scan = await loadScan(cachePath, scanKey, state);
  if (scan === null) {
    scan = await scanRecords(checked(readCsv(input.path, input.displayName, format), ctx.interrupt, progress), state, options.column, input.bytes);
    // Only a cache: a run that cannot write it is slower to resume, nothing worse.
    await saveScan(cachePath, scanKey, scan, state.domains).catch(() => {});
  } else {
    progress.rows = scan.rows;
  }

  // 2. The journal: refuse one that belongs to other work, replay one that is ours.
  const service = options.service.kind === 'sandbox' ? EMBEDDED_SERVICE : serviceName(options.service.baseUrl);
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
    ctx.reporter.refresh();
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
  ctx.reporter.refresh();
  const writeOutput = options.writesOutput && stop?.reason !== 'interrupted' && stop?.reason !== 'auth';
  const tally = writeOutput
    ? await writeResults({ options, scan, state, input, format, journalPath: journal.path, stop, ctx })
    : countResults(scan, state, options.dryRun, stop);
  progress.phase = 'done';
  ctx.reporter.refresh();
  const summary = summarise({
    state,
    tally,
    rows: scan.rows,
    dryRun: options.dryRun,
    stop,
    journal: journal.path,
    output: writeOutput ? options.output : null,
  });
  return { summary, stop, setAside: journal.setAside };
}

/** A stable identity for the service the journal's records came from (not the key: never the key). */
function serviceName(baseUrl: string): string {
  const { origin, prefix } = serviceEndpoint(baseUrl);
  return `${origin}${prefix}`;
}

/**
 * Stable per company within a journal: the run id, the company, and the key version, which moves
 * on only when the service's answers prove the current key uncharged (pipeline/keys.ts). The
 * domain is hashed to keep keys short and uniform.
 */
export function idempotencyKey(run: string, domain: string, version: number): string {
  const digest = createHash('sha256').update(domain).digest('hex').slice(0, 24);
  return `enrich-${run}-${digest}-v${version}`;
}

/** The network stack and the sandbox load only when there is work for them (not on a resume that is already done). */
async function connect(options: RunOptions, cleanups: Cleanups): Promise<ServiceClient> {
  const { createClient, createDispatcher } = await import('../api/client.js');
  let baseUrl: string;
  let apiKey: string;
  if (options.service.kind === 'sandbox') {
    const { startSandbox } = await import('../sandbox/index.js');
    const sandbox = await startSandbox(options.service.options);
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

/**
 * Row i -> its result, formatted by `format`: each distinct result (a company, a miss, an invalid
 * reason; see resultKey) is built and formatted once, however many rows share it, and every row
 * is counted in `tally` as it is asked for.
 */
function formattedResults<T>(
  scan: ScanResult,
  state: RunState,
  build: (ref: number) => RowResult,
  format: (result: RowResult) => T,
  tally: RowTally,
): (row: number) => T {
  const cache = new Map<string, { status: RowResult['status']; value: T }>();
  return (row) => {
    const ref = scan.rowRefs.get(row);
    const key = resultKey(ref, state);
    let hit = cache.get(key);
    if (hit === undefined) {
      const result = build(ref);
      hit = { status: result.status, value: format(result) };
      if (cache.size >= 100_000) cache.clear();
      cache.set(key, hit);
    }
    tally[hit.status]++;
    return hit.value;
  };
}

function countResults(scan: ScanResult, state: RunState, dryRun: boolean, stop: Stop | null): RowTally {
  const tally = emptyTally();
  const status = formattedResults(scan, state, (ref) => resultForRow(ref, state, null, { dryRun, stop }), (r) => r.status, tally);
  for (let i = 0; i < scan.rows; i++) status(i);
  return tally;
}

interface Written {
  options: RunOptions;
  scan: ScanResult;
  state: RunState;
  input: InputSource;
  format: CsvFormat;
  journalPath: string;
  stop: Stop | null;
  ctx: RunContext;
}

async function writeResults({ options, scan, state, input, format, journalPath, stop, ctx }: Written): Promise<RowTally> {
  const tally = emptyTally();
  const records = new RecordReader(journalPath);
  const sink = await openSink(options.output, ctx.stdout);
  const build = (ref: number): RowResult => resultForRow(ref, state, (r) => records.read(r), { dryRun: options.dryRun, stop });
  const checkpoint = (): void => {
    if (ctx.interrupt.aborted) throw new InterruptedError('interrupted while writing results; the journal is complete, run the same command to write them');
  };
  let done = false;
  try {
    if (options.format === 'csv') {
      await copyCsvWithResults({
        inputPath: input.path,
        sink,
        format,
        header: scan.header,
        headerRange: scan.headerRange,
        rows: scan.rows,
        rowEnds: scan.rowEnds,
        rowStarts: scan.rowStarts,
        suffix: formattedResults(scan, state, build, (r) => csvResultSuffix(r, format, { raw: options.rawServiceText === true }), tally),
        checkpoint,
      });
    } else {
      await writeJsonlResults({
        inputPath: input.path,
        displayName: input.displayName,
        sink,
        format,
        header: scan.header,
        headerless: scan.headerless,
        result: formattedResults(scan, state, build, jsonlResultFormatter(scan.header, { raw: options.rawServiceText === true }), tally),
        checkpoint,
      });
    }
    await sink.finish();
    done = true;
  } finally {
    records.close();
    if (!done) await sink.abort();
  }
  return tally;
}
