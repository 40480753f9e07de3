import v8 from 'node:v8';
import type { RunOptions, RunResult } from '../commands/run.js';
import { EnrichError, ExitCode, errorMessage } from '../errors.js';
import type { Journal } from '../journal/index.js';
import type { Reporter } from '../ui/reporter.js';
import { parseCommandLine, type RunFlags } from './program.js';
import { performance } from 'node:perf_hooks';

// Only parsing is loaded up front: --version and --help must start as fast as node itself, so
// the batch, the sandbox and the live display (ora, cli-progress, csv, undici) load when asked.

export interface CliIO {
  stdin: NodeJS.ReadableStream;
  stdout: NodeJS.WritableStream;
  stderr: NodeJS.WritableStream & { isTTY?: boolean; columns?: number };
  env: NodeJS.ProcessEnv;
  /** Subscribes to SIGINT/SIGTERM; returns the unsubscribe. */
  onSignal(handler: (signal: NodeJS.Signals) => void): () => void;
  /** Ends the process now (a second Ctrl-C). */
  hardExit(code: number): void;
}

/**
 * Keeps the heap near what is live. V8 otherwise lets the old generation grow up to fourfold
 * between collections under a high allocation rate (tens of thousands of requests), which is
 * most of a batch's peak memory. Growing by a fixed ENRICH_HEAP_GROWTH percent (default 25)
 * cut a 1M-row run's peak from 188 to 167 MiB; it costs about a tenth more CPU against an
 * unlimited service (measured), nothing in a run bound by the service's rate. The flag is read
 * on every collection, so setting it here, before any work, takes effect.
 */
export function tuneProcess(env: NodeJS.ProcessEnv = process.env): void {
  const percent = Number(env['ENRICH_HEAP_GROWTH'] ?? 25);
  // V8 prints an unknown flag's error to stdout (our data): set it only on the V8s of Node 20
  // to 24 (11 to 13), where it is known to exist; a later V8 runs untuned until checked.
  const major = Number(process.versions.v8.split('.')[0]);
  if (Number.isInteger(percent) && percent > 0 && major >= 11 && major <= 13) v8.setFlagsFromString(`--heap-growing-percent=${percent}`);
}

export function processIO(): CliIO {
  // A reader that goes away (`enrich x.csv | head`, a closed terminal) is not a crash: writers
  // see the stream's state and stop; nothing else needs the error event.
  for (const stream of [process.stdout, process.stderr]) stream.on('error', () => {});
  return {
    stdin: process.stdin,
    stdout: process.stdout,
    stderr: process.stderr,
    env: process.env,
    onSignal(handler) {
      const signals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM'];
      for (const s of signals) process.on(s, handler);
      return () => {
        for (const s of signals) process.off(s, handler);
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
      case 'run': {
        const { resolveRunOptions } = await import('./options.js');
        const options = await resolveRunOptions(parsed.flags, io.env);
        if (options.service.kind === 'remote') redact = redactor([options.service.apiKey]);
        return await runCommand(parsed.flags, options, io, redact);
      }
    }
  } catch (error) {
    if (error instanceof EnrichError) {
      io.stderr.write(`enrich: ${redact(error.message)}\n`);
      return error.exitCode;
    }
    io.stderr.write(`enrich: unexpected error: ${redact(errorMessage(error))}\n`);
    if (io.env['ENRICH_DEBUG'] !== undefined && error instanceof Error && error.stack !== undefined) io.stderr.write(`${redact(error.stack)}\n`);
    else io.stderr.write('enrich: (set ENRICH_DEBUG=1 for details; the journal, if any, is intact)\n');
    return ExitCode.FAILURE;
  }
}

const setTo = (value: string | undefined): boolean => value !== undefined && value !== '' && value !== '0' && value.toLowerCase() !== 'false';

/**
 * A live display only for a person at a terminal: stderr is a TTY, and neither CI, NO_COLOR
 * (no-color.org), TERM=dumb, --quiet nor --no-progress says otherwise. Everything else gets
 * plain lines at most every few seconds (none with --quiet), with no escape sequences.
 */
export async function chooseReporter(flags: Pick<RunFlags, 'quiet' | 'progress' | 'output'>, io: Pick<CliIO, 'stderr' | 'stdout' | 'env'>): Promise<Reporter> {
  const now = (): number => performance.now();
  // A terminal that reports no width (0 columns) cannot be redrawn in place.
  const interactive =
    io.stderr.isTTY === true &&
    (io.stderr.columns ?? 0) > 0 &&
    !flags.quiet &&
    flags.progress &&
    !setTo(io.env['CI']) &&
    (io.env['NO_COLOR'] ?? '') === '' &&
    io.env['TERM'] !== 'dumb';
  if (interactive) {
    const outputToTerminal = (flags.output ?? '-') === '-' && (io.stdout as { isTTY?: boolean }).isTTY === true;
    const { ttyReporter } = await import('../ui/tty.js');
    return ttyReporter({ stream: io.stderr, now, outputToTerminal });
  }
  const { plainReporter } = await import('../ui/plain.js');
  return plainReporter({ stream: io.stderr, intervalMs: 5_000, quiet: flags.quiet, now });
}

async function runCommand(flags: RunFlags, options: RunOptions, io: CliIO, redact: (s: string) => string): Promise<number> {
  const interrupt = new AbortController();
  let journal: Journal | undefined;
  const off = io.onSignal((signal) => {
    if (!interrupt.signal.aborted) {
      io.stderr.write(`\nenrich: ${signal}: letting requests already sent finish, then saving the journal (press Ctrl-C again to quit at once)\n`);
      interrupt.abort();
      return;
    }
    journal?.releaseLockSync();
    io.stderr.write('enrich: quit at once; the journal is valid, run the same command to resume\n');
    io.hardExit(ExitCode.INTERRUPTED);
  });
  const [reporter, { runBatch }, { formatSummary, nextStep }] = await Promise.all([
    chooseReporter(flags, io),
    import('../commands/run.js'),
    import('../ui/summary.js'),
  ]);
  let result: RunResult;
  try {
    result = await runBatch(options, {
      stdin: io.stdin,
      stdout: io.stdout,
      env: io.env,
      reporter,
      interrupt: interrupt.signal,
      onJournal: (j) => (journal = j),
    });
  } finally {
    off();
  }
  const { summary, stop } = result;
  if (result.setAside !== null) reporter.note(`the previous journal was kept as ${result.setAside}`);
  if (!flags.quiet) io.stderr.write(formatSummary(summary));
  const next = nextStep(summary, stop);
  if (next !== null) io.stderr.write(`enrich: ${redact(next)}\n`);
  if (flags.summaryJson !== undefined) {
    const json = `${JSON.stringify(summary, null, 2)}\n`;
    if (flags.summaryJson === '-') io.stdout.write(json);
    else await (await import('node:fs/promises')).writeFile(flags.summaryJson, json, { mode: 0o600 });
  }
  switch (stop?.reason) {
    case 'interrupted':
      return ExitCode.INTERRUPTED;
    case 'auth':
      return ExitCode.AUTH;
    case 'credits':
    case 'budget':
      return ExitCode.CREDITS;
    case undefined:
      return summary.errors > 0 ? ExitCode.PARTIAL : ExitCode.OK;
  }
}
