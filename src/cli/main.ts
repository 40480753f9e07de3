import { lstat, rm, writeFile } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import type { RunOptions, RunResult } from '../commands/run.js';
import { EnrichError, ExitCode, errorMessage, UsageError, type ErrorKind } from '../errors.js';
import type { Stop } from '../pipeline/stops.js';
import type { Summary } from '../pipeline/summary.js';
import type { Reporter } from '../ui/reporter.js';
import { parseCommandLine, type RunFlags } from './program.js';
import { monotonicMs } from '../pipeline/clock.js';
import { inheritedDescriptor, plantedLink } from '../io/paths.js';

// Only parsing loads up front, so --version and --help start as fast as node; the batch, sandbox and live display load when asked.

export interface CliIO {
  stdin: NodeJS.ReadableStream;
  stdout: NodeJS.WritableStream;
  stderr: NodeJS.WritableStream & { isTTY?: boolean; columns?: number };
  env: NodeJS.ProcessEnv;
  /** Subscribes to SIGINT, SIGTERM and SIGHUP; returns the unsubscribe. */
  onSignal(handler: (signal: NodeJS.Signals) => void): () => void;
  /** Ends the process now (a second Ctrl-C). */
  hardExit(code: number): void;
}

export function processIO(): CliIO {
  // A reader that goes away (`| head`, a closed terminal) is not a crash: writers see the stream's state and stop.
  for (const stream of [process.stdout, process.stderr]) stream.on('error', () => {});
  const signals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];
  // Until a command listens, a signal ends the process as interrupted (130), as it does once one listens.
  const early = (signal: NodeJS.Signals): void => {
    process.stderr.write(`enrich: ${signal === 'SIGINT' ? 'Ctrl-C' : signal}: interrupted; run the same command to finish\n`);
    process.exit(ExitCode.INTERRUPTED);
  };
  let listening = 0;
  const idle = (on: boolean): void => {
    for (const s of signals) {
      if (on) process.on(s, early);
      else process.off(s, early);
    }
  };
  idle(true);
  return {
    get stdin() {
      // Created only when read from: opening stdin costs a little even when the input is a file.
      return process.stdin;
    },
    stdout: process.stdout,
    stderr: process.stderr,
    env: process.env,
    onSignal(handler) {
      // SIGHUP (a closed terminal, a dropped ssh) stops as gracefully as SIGTERM; by default it would kill the run, its requests unrecorded.
      if (listening++ === 0) idle(false);
      for (const s of signals) process.on(s, handler);
      return () => {
        for (const s of signals) process.off(s, handler);
        if (--listening === 0) idle(true);
      };
    },
    hardExit: (code) => process.exit(code),
  };
}

/** Hides secrets from anything we print, whatever path a message took to get here. */
function redactor(secrets: readonly string[]): (text: string) => string {
  const real = secrets.filter((s) => s.length >= 4);
  return (text) => real.reduce((t, s) => t.split(s).join('[redacted]'), text);
}

/** The one place where outcomes and errors become exit codes and messages. */
export async function main(argv: readonly string[], io: CliIO): Promise<number> {
  const parsed = parseCommandLine(argv, { writeOut: (s) => io.stdout.write(s), writeErr: (s) => io.stderr.write(s) }, io.env);
  let redact = redactor([]);
  try {
    switch (parsed.kind) {
      case 'exit':
        return parsed.exitCode;
      case 'sandbox': {
        const [{ serveSandbox }, { generateKey }] = await Promise.all([import('../commands/sandbox.js'), import('../sandbox/index.js')]);
        const options = parsed.options.keys.length > 0 ? parsed.options : { ...parsed.options, keys: [generateKey()] };
        const stop = new AbortController();
        const off = io.onSignal(() => stop.abort());
        try {
          await serveSandbox(options, io.stdout, stop.signal);
        } finally {
          off();
        }
        return ExitCode.OK;
      }
      case 'ledger': {
        const { ledger, checkService } = await import('../commands/ledger.js');
        const { checkStoreFolder, defaultStorePath, resolveStorePath, storeFilePath } = await import('../store/path.js');
        const { action } = parsed.options;
        let checked = action.kind === 'export' ? { ...action, service: checkService(action.service) } : action;
        if (checked.kind === 'copy') {
          // Both named as --store is; only the target may be made, in a folder that is there (never a postgres:// address's).
          checked = { ...checked, from: storeFilePath(checked.from, 'ledger copy <from>'), to: storeFilePath(checked.to, 'ledger copy <to>') };
          checkStoreFolder(checked.to, io.env);
        }
        const store = checked.kind === 'copy' ? checked.to : resolveStorePath(parsed.options.store, io.env);
        // Only an import may start a store: in a folder that is there, as for a batch (checkStoreFolder passes a postgres:// address).
        if (action.kind === 'import') checkStoreFolder(store, io.env);
        const isDefault = store === defaultStorePath(io.env);
        await ledger({ store, isDefault, json: parsed.options.json, action: checked }, { stdout: io.stdout, env: io.env, note: (text) => void io.stderr.write(`enrich: ${text}\n`) });
        return ExitCode.OK;
      }
      case 'doctor': {
        const [{ runDoctor }, { resolveDoctorOptions }] = await Promise.all([import('../commands/doctor.js'), import('./options.js')]);
        const options = await resolveDoctorOptions(parsed.flags, io.env);
        if (options.service.kind === 'remote' && options.service.key.ok) redact = redactor([options.service.key.value]);
        return exitCode(await runDoctor(options, io.stdout));
      }
      case 'run': {
        const { resolveRunOptions } = await import('./options.js');
        const options = await resolveRunOptions(parsed.flags, io.env);
        if (options.service.kind === 'remote') redact = redactor([options.service.apiKey]);
        return await runCommand(parsed.flags, options, io, redact);
      }
    }
  } catch (error) {
    if (error instanceof EnrichError) {
      // A reader that stopped reading wanted no more: nothing to say to it, or to anyone.
      if (error.kind !== 'closed_pipe') io.stderr.write(`enrich: ${redact(error.message)}\n`);
      // Stopped while results waited on a reader that stopped reading: the process would wait on those bytes, so it ends here.
      if ((error as { stalled?: boolean }).stalled === true) io.hardExit(exitCode(error.kind));
      return exitCode(error.kind);
    }
    io.stderr.write(`enrich: unexpected error: ${redact(errorMessage(error))}\n`);
    if (io.env['ENRICH_DEBUG'] !== undefined && error instanceof Error && error.stack !== undefined) io.stderr.write(`${redact(error.stack)}\n`);
    else io.stderr.write(`enrich: (set ENRICH_DEBUG=1 for details; ${await storeState(error)})\n`);
    return ExitCode.FAILURE;
  }
}

/** What an unexplained failure says of the store: intact, unless the error came from SQLite itself. */
async function storeState(error: unknown): Promise<string> {
  const { sqliteCode } = await import('../store/sqlite/errors.js');
  return sqliteCode(error) === '' ? 'the store, if any, is intact' : '`enrich doctor` checks the store';
}

const setTo = (value: string | undefined): boolean => value !== undefined && value !== '' && value !== '0' && value.toLowerCase() !== 'false';

/**
 * A live display only for a person at a terminal: stderr a TTY reporting its width, and no --quiet, CI or TERM=dumb; --progress/--no-progress
 * or ENRICH_PROGRESS force it. NO_COLOR changes nothing (the display has no colour). Else plain lines every few seconds, no escapes.
 */
export async function chooseReporter(flags: Pick<RunFlags, 'quiet' | 'progress' | 'output'> & Partial<Pick<RunFlags, 'input'>>, io: Pick<CliIO, 'stderr' | 'stdout' | 'env'> & Partial<Pick<CliIO, 'stdin'>>): Promise<Reporter> {
  const now = monotonicMs;
  const fromEnv = io.env['ENRICH_PROGRESS'];
  const forced = flags.progress ?? (fromEnv === undefined || fromEnv === '' ? undefined : setTo(fromEnv));
  // A terminal that reports no width (0 columns) cannot be redrawn in place.
  const interactive =
    io.stderr.isTTY === true && (io.stderr.columns ?? 0) > 0 && !flags.quiet && (forced ?? (!setTo(io.env['CI']) && io.env['TERM'] !== 'dumb'));
  if (interactive) {
    const outputToTerminal = (flags.output ?? '-') === '-' && (io.stdout as { isTTY?: boolean }).isTTY === true;
    const { ttyReporter } = await import('../ui/tty.js');
    const inputFromTerminal = flags.input === '-' && io.stdin !== undefined && isTTY(io.stdin);
    return ttyReporter({ stream: io.stderr, now, outputToTerminal, noColor: (io.env['NO_COLOR'] ?? '') !== '', inputFromTerminal });
  }
  const { plainReporter } = await import('../ui/plain.js');
  return plainReporter({ stream: io.stderr, intervalMs: 5_000, quiet: flags.quiet, now, ...(io.stderr.isTTY === true ? {} : { stamped: () => new Date() }) });
}

async function runCommand(flags: RunFlags, options: RunOptions, io: CliIO, redact: (s: string) => string): Promise<number> {
  const interrupt = new AbortController();
  const [reporter, { runBatch }] = await Promise.all([chooseReporter(flags, io), import('../commands/run.js')]);
  // Through the reporter, which erases the live display (and the echoed ^C) first; "interrupted" is said once, by the summary's title.
  const off = io.onSignal((signal) => {
    if (!interrupt.signal.aborted) {
      reporter.warn(`${signal === 'SIGINT' ? 'Ctrl-C' : signal}: stopping; requests already sent finish and what they buy is kept (Ctrl-C again quits at once)`);
      interrupt.abort();
      return;
    }
    reporter.end();
    io.stderr.write('enrich: quit at once; the store is consistent, run the same command to finish\n');
    io.hardExit(ExitCode.INTERRUPTED);
  });
  let result: RunResult;
  try {
    result = await withoutStaleSummary(flags.summaryJson, () => runBatch(options, {
      get stdin() {
        return io.stdin;
      },
      stdout: io.stdout,
      env: io.env,
      reporter,
      interrupt: interrupt.signal,
      ...(canAsk(flags, io) ? { ask: (question: string) => askYesNo(question, io, reporter, interrupt.signal) } : {}),
    }));
  } catch (error) {
    off();
    throw error;
  }
  // The run is over: a signal while its summary is written is let pass ("interrupted" would be untrue), not the early listener's exit 130.
  const settled = io.onSignal(() => {});
  off();
  try {
    return await reportRun(result, flags, io, redact);
  } finally {
    settled();
  }
}

/** The run's summary, next step and --summary-json, and its exit code. */
async function reportRun(result: RunResult, flags: RunFlags, io: CliIO, redact: (s: string) => string): Promise<number> {
  const [{ fitSummary, formatSummary, nextStep }, { wrapWords }] = await Promise.all([import('../ui/summary.js'), import('../ui/format.js')]);
  const { summary, stop } = result;
  const next = nextStep(summary, stop);
  // A refused key, or a service that never answered, leaves nothing to count: the one line that matters is all.
  const nothingToCount = stop?.reason === 'auth' || (stop?.reason === 'unavailable' && !stop.worked);
  // Broken at spaces on a terminal, which would otherwise cut a word (or a path) in two.
  const columns = io.stderr.isTTY === true ? (io.stderr.columns ?? 0) - 1 : 0;
  if (!flags.quiet && !nothingToCount) io.stderr.write(fitSummary(formatSummary(summary), columns));
  // --quiet keeps only what needs acting on: a dry run's closing estimate is in its summary JSON.
  const quietDry = flags.quiet && summary.dry_run && stop === null;
  if (next !== null && !quietDry) io.stderr.write(`${wrapWords(`enrich: ${redact(next)}`, columns)}\n`);
  if (flags.summaryJson !== undefined) {
    const json = `${JSON.stringify(summary, null, 2)}\n`;
    if (flags.summaryJson === '-') io.stdout.write(json);
    // Through the descriptor, as results are (see inheritedDescriptor): `--summary-json /dev/stderr`.
    else if (inheritedDescriptor(flags.summaryJson) === 2) io.stderr.write(json);
    else {
      // Looked at again as it is written: a link planted since the start is not followed either.
      const planted = plantedLink(flags.summaryJson);
      if (planted !== null) throw new UsageError(`--summary-json ${planted}`);
      // A file there keeps its mode and group; a new one gets the umask's.
      await writeFile(flags.summaryJson, json, { mode: 0o666 });
    }
  }
  return exitCode(troubleOf(stop, summary));
}

/** A failed run must not leave yesterday's --summary-json looking like today's: it is removed (its path was checked before the run, so nothing else can be). */
async function withoutStaleSummary<T>(path: string | undefined, run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (error) {
    if (path !== undefined && path !== '-' && inheritedDescriptor(path) === null) {
      if ((await lstat(path).catch(() => null))?.isFile() === true) await rm(path, { force: true });
    }
    throw error;
  }
}

const isTTY = (stream: unknown): boolean => (stream as { isTTY?: boolean }).isTTY === true;

/** Only a person at a terminal is asked: never a pipe, cron or CI, nor a run whose stdin is its input. */
function canAsk(flags: RunFlags, io: CliIO): boolean {
  return !flags.yes && flags.input !== '-' && isTTY(io.stdin) && isTTY(io.stderr) && !setTo(io.env['CI']);
}

/** One line from the terminal: y or yes is yes; anything else, end of input or Ctrl-C is no. */
async function askYesNo(question: string, io: CliIO, reporter: Reporter, interrupt: AbortSignal): Promise<boolean> {
  const resume = reporter.pause?.();
  io.stderr.write(`enrich: ${question}`);
  // Not a terminal-mode reader: Ctrl-C stays the process's SIGINT, which stops the run as ever.
  const rl = createInterface({ input: io.stdin, terminal: false });
  const answer = await new Promise<string>((resolve) => {
    // Resolved before close(), which emits 'close' at once and would answer '' in its place.
    const done = (text: string): void => {
      resolve(text);
      interrupt.removeEventListener('abort', onAbort);
      rl.close();
    };
    const onAbort = (): void => done('');
    interrupt.addEventListener('abort', onAbort, { once: true });
    rl.once('line', done);
    rl.once('close', () => done(''));
  });
  resume?.();
  return /^\s*y(es)?\s*$/i.test(answer);
}

/** The one table from a kind of trouble to the exit code scripts branch on (README "Exit codes"). */
const EXIT_CODES: Record<ErrorKind, ExitCode> = {
  failure: ExitCode.FAILURE,
  usage: ExitCode.USAGE,
  partial: ExitCode.PARTIAL,
  credits: ExitCode.CREDITS,
  auth: ExitCode.AUTH,
  unavailable: ExitCode.UNAVAILABLE,
  interrupted: ExitCode.INTERRUPTED,
  closed_pipe: ExitCode.CLOSED_PIPE,
};

export const exitCode = (kind: ErrorKind | null): ExitCode => (kind === null ? ExitCode.OK : EXIT_CODES[kind]);

/** What kind of trouble a finished batch is in: why it stopped, or whether rows failed. */
function troubleOf(stop: Stop | null, summary: Summary): ErrorKind | null {
  switch (stop?.reason) {
    case 'interrupted':
      return 'interrupted';
    case 'auth':
      return 'auth';
    case 'unavailable':
      return 'unavailable';
    case 'credits':
    case 'budget':
    case 'monthly':
      return 'credits';
    case undefined:
      // A dry run's unanswered matches leave its estimate a lower bound: a rerun may clear them.
      return summary.status === 'partial' || (summary.dry_run && summary.unanswered_domains > 0) ? 'partial' : null;
  }
}
