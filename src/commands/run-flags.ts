import { Option, type Command } from 'commander';
import { duration, integer, stdoutAlias } from './values.js';

/** The batch's flags as typed values, named as commander names them; cli/options.ts turns them into RunOptions. */
export interface RunFlags {
  input: string;
  /** Unset means stdout; a dry run writes results only when -o is given. */
  output: string | undefined;
  format: 'csv' | 'jsonl' | undefined;
  column: string | undefined;
  dryRun: boolean;
  maxCredits: number | undefined;
  store: string | undefined;
  /** Durations, in ms. */
  maxAge: number | undefined;
  missMaxAge: number | undefined;
  settle: number | undefined;
  timeout: number | undefined;
  journal: string | undefined;
  fresh: boolean;
  concurrency: number;
  summaryJson: string | undefined;
  baseUrl: string | undefined;
  sandbox: boolean;
  apiKeyFile: string | undefined;
  quiet: boolean;
  /** --progress / --no-progress; undefined: decided from the terminal and the environment. */
  progress: boolean | undefined;
  rawServiceText: boolean;
  /** Let a dry run replace an existing -o file (its results would become estimates). */
  overwrite: boolean;
  /** Skip the question before a large spend on a terminal. */
  yes: boolean;
}

/** The bound on requests in flight (and the pool's size; connections open only as used); the flow learns how many are needed below it. 128 keeps 500 req/s at 200 ms saturated. */
export const DEFAULT_CONCURRENCY = 128;

// Kept within 80 columns: a help line longer than the terminal wraps mid-word.
const EXAMPLES = `
Examples:
  Analyst: a CSV export in, a file out (rerun after any stop; nothing is lost):
    $ export ENRICH_API_KEY=...   # or --api-key-file ~/.config/enrich/key
    $ enrich companies.csv -o enriched.csv

  Next month's export: only new companies, and records over 90 days old:
    $ enrich companies-december.csv -o enriched.csv --max-age 90d

  Cron: the file itself, -o for an atomic write, the key from a file
  (check the set-up first with enrich doctor):
    $ enrich crm.csv --column "Company Website" -o enriched.jsonl \\
        --api-key-file ~/.config/enrich/key --summary-json run.json --quiet

  Finance: what would it add to this month's bill? (free: spends nothing)
    $ enrich companies.csv --dry-run

  Try everything against the embedded sandbox, no key needed:
    $ enrich fixtures/companies.csv --sandbox -o enriched.csv

Environment:
  ENRICH_API_KEY     the API key (never an argument: argv shows in ps)
  ENRICH_BASE_URL    the service address, e.g. https://data.example.com
  ENRICH_STORE       the purchase store (default:
                     $XDG_STATE_HOME/enrich/store.db)
  ENRICH_PROGRESS    1: the live display even under CI; 0: plain lines

Exit codes: 0 done · 1 unexpected failure · 2 usage or input error ·
  3 finished, some rows failed · 4 stopped for credits (402, --max-credits,
  or "no" when asked), resumable · 5 key refused (401/403) ·
  6 service unreachable or asks to wait too long, rerun later ·
  130 interrupted, resumable · 141 stdout closed (| head)
`;

/** The batch, the program's own (default) command: `enrich <input> [options]`. */
export function defineRun(command: Command, done: (flags: RunFlags) => void): Command {
  return command
    .argument('[input]', 'CSV file to read, or - for stdin')
    .option('-o, --output <path>', 'where results go, - for stdout (the default; a dry run writes none unless given)', stdoutAlias)
    .addOption(new Option('--format <format>', 'results format (default: from the output extension, else csv)').choices(['csv', 'jsonl']))
    .option('--column <name>', 'the column holding domains (default: detected from the header)')
    .option('--dry-run', 'run the free matches only and report the exact cost; spends nothing', false)
    .option('--max-credits <n>', 'never spend more than n credits in this invocation', integer(0, Number.MAX_SAFE_INTEGER, '--max-credits'))
    .option('-y, --yes', 'on a terminal, buy more than 100 credits without asking first', false)
    .option('--overwrite', 'let a dry run replace an existing -o or --summary-json file', false)
    .option('--store <path>', 'the purchase store (env: ENRICH_STORE; default: $XDG_STATE_HOME/enrich/store.db)')
    .option('--max-age <duration>', 'buy again records bought longer ago than this, e.g. 30d (default: never)', duration('--max-age'))
    .option('--miss-max-age <duration>', 'ask again about domains that did not match longer ago than this (free; default 30d)', duration('--miss-max-age'))
    .option('--settle <duration>', 'how long a paid call whose answer was lost may still run at the service (default 60s; at least --timeout)', duration('--settle'))
    .option('--timeout <duration>', 'the longest one request may take, its whole answer included (default 60s)', duration('--timeout'))
    .option('--fresh', 'buy every held record again (same as --max-age 0; the dry run prices it)', false)
    .option('--journal <path>', 'import a journal written by enrich 0.1 (one beside the input is found by itself)')
    .option('--concurrency <n>', 'most requests in flight at once (how many are is learned below it)', integer(1, 256, '--concurrency'), DEFAULT_CONCURRENCY)
    .option('--summary-json <path>', 'also write the totals as JSON (- for stdout)', stdoutAlias)
    .option('--base-url <url>', 'service address (env: ENRICH_BASE_URL)')
    .option('--sandbox', 'run against an embedded sandbox started in-process (no key needed)', false)
    .option('--api-key-file <path>', 'read the API key from a file instead of ENRICH_API_KEY')
    .option('-q, --quiet', 'no progress or notes on stderr; warnings and the exit code still tell', false)
    .option('--progress', 'the live display at a terminal, even under CI or TERM=dumb (env: ENRICH_PROGRESS=1)')
    .option('--no-progress', 'no live display: plain lines only (env: ENRICH_PROGRESS=0)')
    .option(
      '--raw-service-text',
      "write the service's text exactly as received; by default a result cell starting with = + - @ gets a leading ' (no live formulas in spreadsheets) and control characters are dropped",
      false,
    )
    .addHelpText('after', EXAMPLES)
    .action((input: string | undefined, opts: Record<string, unknown>) => {
      if (input === undefined) {
        command.error('missing input: give a CSV file, or - to read stdin', { exitCode: 2, code: 'enrich.missingInput' });
      }
      done({ ...(opts as Omit<RunFlags, 'input'>), input });
    });
}
