import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import { VERSION } from '../version.js';
import type { SandboxCommandOptions } from '../commands/sandbox.js';

/** The batch's flags as typed values; cli/options.ts turns them into RunOptions. */
export interface RunFlags {
  input: string;
  /** Unset means stdout; a dry run writes results only when -o is given. */
  output: string | undefined;
  format: 'csv' | 'jsonl' | undefined;
  column: string | undefined;
  dryRun: boolean;
  maxCredits: number | undefined;
  journal: string | undefined;
  fresh: boolean;
  concurrency: number;
  summaryJson: string | undefined;
  baseUrl: string | undefined;
  sandbox: boolean;
  apiKeyFile: string | undefined;
  quiet: boolean;
  progress: boolean;
}

export type ParsedCommand =
  | { kind: 'run'; flags: RunFlags }
  | { kind: 'sandbox'; options: SandboxCommandOptions }
  /** Help or version was printed, or the arguments were refused (commander said why). */
  | { kind: 'exit'; exitCode: number };

export interface ProgramOutput {
  writeOut(text: string): void;
  writeErr(text: string): void;
}

/**
 * The bound on requests in flight; the scheduler learns how many the service needs below it
 * (rate x latency). 128 keeps 500 req/s at 200 ms a request saturated, and is the size of the
 * connection pool, which opens connections only as they are used.
 */
export const DEFAULT_CONCURRENCY = 128;

const integer = (min: number, max: number, what: string) => (value: string): number => {
  const n = Number(value);
  if (!/^\d+$/.test(value.trim()) || !Number.isSafeInteger(n) || n < min || n > max) {
    throw new InvalidArgumentError(`${what} must be a whole number from ${min} to ${max}`);
  }
  return n;
};

const fraction = (value: string): number => {
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || n < 0 || n > 1) throw new InvalidArgumentError('must be a number from 0 to 1');
  return n;
};

const EXAMPLES = `
Examples:
  Analyst, a CSV export in and a file out (resumable: rerun the same command after any stop):
    $ export ENRICH_API_KEY=...   # or --api-key-file ~/.config/enrich/key
    $ enrich companies.csv -o enriched.csv

  Cron, domains piped through, totals for the log:
    $ cut -d, -f3 crm.csv | enrich - --format jsonl --summary-json run.json > enriched.jsonl

  Finance, what would it cost? (free: matches only, spends nothing)
    $ enrich companies.csv --dry-run

  Try everything against the embedded sandbox, no key needed:
    $ enrich fixtures/companies.csv --sandbox -o enriched.csv

Environment:
  ENRICH_API_KEY     the API key (never pass it as an argument: argv shows in ps)
  ENRICH_BASE_URL    the service address, e.g. https://data.example.com
  NO_COLOR, CI       plain progress lines instead of a live display

Exit codes: 0 done · 1 unexpected failure · 2 usage or input error · 3 finished, some rows failed ·
  4 stopped for credits (402 or --max-credits), resumable · 5 key refused (401/403) · 130 interrupted, resumable
`;

/**
 * The command line: `enrich <input>` (the batch, the default command) and `enrich sandbox`.
 * Parsing only: nothing here touches files or the network.
 */
export function parseCommandLine(argv: readonly string[], out: ProgramOutput, env: NodeJS.ProcessEnv): ParsedCommand {
  let parsed: ParsedCommand | undefined;
  const program = new Command('enrich')
    .description('Enrich a CSV of company domains: free match first, then pay only for companies found.\nEvery outcome is journaled, so any stop resumes without paying twice.')
    .version(VERSION, '-V, --version', 'print the version')
    .helpOption('-h, --help', 'show this help')
    .argument('[input]', 'CSV file to read, or - for stdin')
    .option('-o, --output <path>', 'where results go, - for stdout (the default; a dry run writes none unless given)')
    .addOption(new Option('--format <format>', 'results format (default: from the output extension, else csv)').choices(['csv', 'jsonl']))
    .option('--column <name>', 'the column holding domains (default: detected from the header)')
    .option('--dry-run', 'run the free matches only and report the exact cost; spends nothing', false)
    .option('--max-credits <n>', 'never spend more than n credits in this invocation', integer(0, Number.MAX_SAFE_INTEGER, '--max-credits'))
    .option('--journal <path>', 'where the run is checkpointed (default: <input>.enrich-journal)')
    .option('--fresh', 'set an existing journal aside and start over (this buys again)', false)
    .option('--concurrency <n>', 'most requests in flight at once (how many are is learned below it)', integer(1, 256, '--concurrency'), DEFAULT_CONCURRENCY)
    .option('--summary-json <path>', 'also write the totals as JSON (- for stdout)')
    .option('--base-url <url>', 'service address (env: ENRICH_BASE_URL)')
    .option('--sandbox', 'run against an embedded sandbox started in-process (no key needed)', false)
    .option('--api-key-file <path>', 'read the API key from a file instead of ENRICH_API_KEY')
    .option('-q, --quiet', 'no progress or notes on stderr; warnings and the exit code still tell', false)
    .option('--no-progress', 'no live progress display (plain lines only)')
    .addHelpText('after', EXAMPLES)
    .showHelpAfterError('(run enrich --help for usage)')
    .action((input: string | undefined, opts: Record<string, unknown>) => {
      if (input === undefined) {
        program.error('missing input: give a CSV file, or - to read stdin', { exitCode: 2, code: 'enrich.missingInput' });
      }
      parsed = {
        kind: 'run',
        flags: {
          input: input as string,
          output: opts['output'] as string | undefined,
          format: opts['format'] as RunFlags['format'],
          column: opts['column'] as string | undefined,
          dryRun: opts['dryRun'] as boolean,
          maxCredits: opts['maxCredits'] as number | undefined,
          journal: opts['journal'] as string | undefined,
          fresh: opts['fresh'] as boolean,
          concurrency: opts['concurrency'] as number,
          summaryJson: opts['summaryJson'] as string | undefined,
          baseUrl: opts['baseUrl'] as string | undefined,
          sandbox: opts['sandbox'] as boolean,
          apiKeyFile: opts['apiKeyFile'] as string | undefined,
          quiet: opts['quiet'] as boolean,
          progress: opts['progress'] as boolean,
        },
      };
    });

  program
    .command('sandbox')
    .description('serve the local implementation of the service (for demos and tests)')
    .option('--port <n>', 'port to listen on (0 picks a free one)', integer(0, 65535, '--port'), 4010)
    .option('--host <host>', 'address to listen on', '127.0.0.1')
    .option('--key <key...>', 'API keys to accept, each with scope search:read (default: $ENRICH_API_KEY, else generated)')
    .option('--balance <credits>', 'starting credits per key', integer(0, Number.MAX_SAFE_INTEGER, '--balance'), 10_000)
    .option('--rate-limit <req/s>', 'requests a second per key, free calls included (0: none)', integer(0, 1_000_000, '--rate-limit'), 0)
    .option('--burst <n>', 'token bucket size (default: one second of --rate-limit)', integer(1, 1_000_000, '--burst'))
    .option('--fail-rate <0..1>', 'share of company calls answered 500', fraction, 0)
    .option('--drop-rate <0..1>', 'share of answers lost after the call ran (connection reset)', fraction, 0)
    .option('--latency <ms>', 'delay before each answer', integer(0, 60_000, '--latency'), 0)
    .option('--seed <n>', 'seed for the injected faults', integer(0, 2 ** 31, '--seed'), 1)
    .action((opts: Record<string, unknown>) => {
      const fromFlag = opts['key'] as string[] | undefined;
      const fromEnv = env['ENRICH_API_KEY'];
      parsed = {
        kind: 'sandbox',
        options: {
          keyFromEnv: fromFlag === undefined && fromEnv !== undefined && fromEnv !== '',
          host: opts['host'] as string,
          port: opts['port'] as number,
          keys: fromFlag ?? (fromEnv !== undefined && fromEnv !== '' ? [fromEnv] : []),
          balance: opts['balance'] as number,
          rateLimit: (opts['rateLimit'] as number) === 0 ? null : (opts['rateLimit'] as number),
          burst: opts['burst'] as number | undefined,
          failRate: opts['failRate'] as number,
          dropRate: opts['dropRate'] as number,
          latencyMs: opts['latency'] as number,
          seed: opts['seed'] as number,
        },
      };
    });

  program
    .exitOverride()
    .configureOutput({
      writeOut: (s) => out.writeOut(s),
      writeErr: (s) => out.writeErr(s),
      outputError: (s, write) => write(`enrich: ${s.replace(/^error: /, '')}`),
    });

  try {
    program.parse([...argv], { from: 'user' });
  } catch (error) {
    if (error instanceof CommanderError) {
      const ok = error.code === 'commander.helpDisplayed' || error.code === 'commander.version' || error.code === 'commander.help';
      return { kind: 'exit', exitCode: ok ? 0 : 2 };
    }
    throw error;
  }
  return parsed ?? { kind: 'exit', exitCode: 2 };
}
