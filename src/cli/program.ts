import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import { VERSION } from '../version.js';
import { inheritedDescriptor } from '../io/paths.js';
import type { LedgerAction } from '../commands/ledger.js';
import { suggestCommand } from './suggest.js';
import type { SandboxCommandOptions } from '../commands/sandbox.js';
import { fixedLatency, parseLatency, type LatencySpec } from '../sandbox/latency.js';

/** `-o /dev/stdout` (or /dev/fd/1, /proc/self/fd/1) is stdout, with all that `-` means for it. */
const stdoutAlias = (path: string): string => (inheritedDescriptor(path) === 1 ? '-' : path);

/** `enrich ledger ...`: the store is resolved from --store / ENRICH_STORE in cli/main.ts. */
export interface LedgerFlags {
  store: string | undefined;
  json: boolean;
  action: LedgerAction;
}

/** The batch's flags as typed values; cli/options.ts turns them into RunOptions. */
export interface RunFlags {
  input: string;
  /** Unset means stdout; a dry run writes results only when -o is given. */
  output: string | undefined;
  format: 'csv' | 'jsonl' | undefined;
  column: string | undefined;
  dryRun: boolean;
  maxCredits: number | undefined;
  store: string | undefined;
  maxAgeMs: number | undefined;
  missMaxAgeMs: number | undefined;
  settleMs: number | undefined;
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

/**
 * `--api-key sk_...` (or `--api-key=sk_...`): refused before parsing, so the value is never echoed
 * back (commander would print `unknown option '--api-key=sk_...'`), with where a key does go.
 */
function keyOnCommandLine(argv: readonly string[]): string | null {
  const end = argv.indexOf('--');
  const flags = end === -1 ? argv : argv.slice(0, end);
  if (!flags.some((a) => a === '--api-key' || a.startsWith('--api-key='))) return null;
  return 'the API key is never taken as a flag value, which `ps` shows to everyone: set ENRICH_API_KEY, or put it in a file and give --api-key-file <path>';
}

/** `enrich help` and `enrich help ledger` work as `--help` does (a file named help: ./help). */
function helpAsFlag(argv: readonly string[]): string[] {
  return argv[0] === 'help' ? [...argv.slice(1), '--help'] : [...argv];
}

/**
 * Commander's refusal as one line with a fix: a suggestion on the same line (not a second one),
 * an unknown option's value never shown, no `--column` offered for `--color` (nothing here is in
 * colour), and several inputs answered with how to do that.
 */
function refusal(message: string, path: string): string {
  let text = message.trim().replace(/^error: /, '');
  text = text.replace(/unknown option '(--[^=']+)=[^']*'/, "unknown option '$1=…'");
  if (/unknown option '--(no-)?colou?r\b/.test(text)) {
    return `${text.replace(/\s*\(Did you mean [^)]*\)/, '')}: enrich prints no colour; --no-progress (or ENRICH_PROGRESS=0) turns off the live display`;
  }
  text = text.replace(/\s*\n?\(Did you mean (.*)\?\)/, ' (did you mean $1?)');
  if (path === 'enrich' && /^too many arguments/.test(text)) {
    return 'one input at a time: run enrich once per file (the store buys no company twice across them), or join the files into one CSV first';
  }
  return text;
}

/** The subcommands, for "did you mean" when an input file is not found. */
export const SUBCOMMANDS = ['sandbox', 'doctor', 'ledger'] as const;

/** `enrich doctor`'s flags; cli/options.ts resolves them without refusing (a refusal is a report line). */
export interface DoctorFlags {
  baseUrl: string | undefined;
  sandbox: boolean;
  apiKeyFile: string | undefined;
  store: string | undefined;
  probeRate: number | null;
  json: boolean;
}

export type ParsedCommand =
  | { kind: 'run'; flags: RunFlags }
  | { kind: 'doctor'; flags: DoctorFlags }
  | { kind: 'sandbox'; options: SandboxCommandOptions }
  | { kind: 'ledger'; options: LedgerFlags }
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
    // MAX_SAFE_INTEGER stands for "no upper limit": say that, not its sixteen digits.
    const range = max === Number.MAX_SAFE_INTEGER ? `, ${min} or more` : ` from ${min} to ${max}`;
    throw new InvalidArgumentError(`${what} must be a whole number${range}`);
  }
  return n;
};

const fraction = (value: string): number => {
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || n < 0 || n > 1) throw new InvalidArgumentError('must be a number from 0 to 1');
  return n;
};

const latencySpec = (value: string): LatencySpec => {
  const spec = parseLatency(value);
  if (spec === undefined) throw new InvalidArgumentError('takes ms (200), a uniform range (100-300) or lognormal:<median>[:<sigma>[:<max>]] (ms, up to 60000)');
  return spec;
};

const UNITS: Record<string, number> = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 };

/** "30d", "12h", "90m", "2w", "45s", or a bare 0: a duration in ms. */
export function parseDuration(value: string, what: string): number {
  const m = /^\s*(\d+)\s*([smhdw])?\s*$/i.exec(value);
  const unit = m?.[2]?.toLowerCase();
  if (m === null || (unit === undefined && m[1] !== '0')) {
    throw new InvalidArgumentError(`${what} takes a duration such as 30d, 12h or 90m (s, m, h, d, w)`);
  }
  return Number(m[1]) * (unit === undefined ? 0 : (UNITS[unit] as number));
}

const duration = (what: string) => (value: string): number => parseDuration(value, what);

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

const LEDGER_EXAMPLES = `
Examples:
  What the store holds, per service:      $ enrich ledger
  The last 20 runs, with credits each:    $ enrich ledger runs
  Every record bought, for a spreadsheet: $ enrich ledger export -o all.csv
  Companies stuck on an unanswered call:  $ enrich ledger release
  Forget records over a year old:
    $ enrich ledger prune --older-than 365d
  Import a journal of enrich 0.1:
    $ enrich ledger import crm.csv.enrich-journal

The store is SQLite: \`sqlite3 ~/.local/state/enrich/store.db\` reads it too
(docs/store-and-resume.md).
`;

const LEDGER_COMMANDS = ['show', 'runs', 'export', 'prune', 'release', 'import'] as const;

/** What is wrong with `enrich ledger [show] <word>`: an unknown option, an argument to show, or a mistyped command. */
function notShow(word: string, namedShow: boolean): string {
  if (word.startsWith('-')) {
    const near = word.startsWith('--') ? suggestCommand(word.slice(2).split('=')[0] ?? '', ['store', 'json']) : null;
    return `unknown option '${word}'${near === null ? '' : ` (did you mean --${near}?)`}`;
  }
  if (namedShow) return `ledger show takes no arguments ('${word}' given)`;
  // `enrich ledger --json runs`: the options came first, so no command was seen.
  if ((LEDGER_COMMANDS as readonly string[]).includes(word)) return `give the command before its options: \`enrich ledger ${word} ...\``;
  const near = suggestCommand(word, LEDGER_COMMANDS);
  return `unknown ledger command '${word}'${near === null ? `: give ${LEDGER_COMMANDS.join(', ')}` : `; did you mean \`enrich ledger ${near}\`?`}`;
}

/** `enrich ledger [show|runs|export|prune|import]`: inspect and own what the store holds. */
function addLedgerCommands(program: Command, done: (options: LedgerFlags) => void): void {
  const ledger = program
    .command('ledger')
    .description('show, export and prune what the purchase store holds')
    .addHelpText('after', LEDGER_EXAMPLES);
  const common = (c: Command): Command =>
    c.option('--store <path>', 'the purchase store (env: ENRICH_STORE)').option('--json', 'machine-readable output', false);
  const finish = (opts: Record<string, unknown>, action: LedgerAction): void =>
    done({ store: opts['store'] as string | undefined, json: opts['json'] as boolean, action });
  common(ledger.command('show', { isDefault: true }).description('companies held, credits spent, oldest record, size on disk'))
    // The default: `enrich ledger bogus` (or `prnue --older-than 3d`) lands here, and is a
    // mistyped command, not an argument nor an option of show's.
    .allowExcessArguments(true)
    .allowUnknownOption(true)
    .action((opts: Record<string, unknown>, command: Command) => {
      const [word] = command.args;
      if (word !== undefined) command.error(notShow(word, command.parent?.args[0] === 'show'), { code: 'commander.unknownCommand' });
      finish(opts, { kind: 'show' });
    });
  common(ledger.command('runs').description('the most recent runs: input, status, credits, bought and reused'))
    .option('--limit <n>', 'how many runs', integer(1, 100_000, '--limit'), 20)
    .action((opts: Record<string, unknown>) => finish(opts, { kind: 'runs', limit: opts['limit'] as number }));
  common(ledger.command('export').description('every record held, as CSV or JSONL'))
    .option('-o, --output <path>', 'where to write (- for stdout)', stdoutAlias, '-')
    .addOption(new Option('--format <format>', 'csv or jsonl (default: from the extension, else csv)').choices(['csv', 'jsonl']))
    .option('--service <service>', 'only this service (as `enrich ledger` names it, or a base URL)')
    .action((opts: Record<string, unknown>, command: Command) => {
      const output = opts['output'] as string;
      const asked = opts['format'] as 'csv' | 'jsonl' | undefined;
      // --json on export means its JSON form, JSONL (one flat object a record); not beside --format csv.
      if (opts['json'] === true && asked === 'csv') command.error('--json and --format csv exclude each other: --json exports JSONL', { exitCode: 2, code: 'enrich.jsonCsv' });
      const format = asked ?? (opts['json'] === true || /\.(jsonl|ndjson)$/i.test(output) ? 'jsonl' : 'csv');
      finish(opts, { kind: 'export', output, format, service: opts['service'] as string | undefined });
    });
  common(ledger.command('prune').description('forget records bought (and lookups made) longer ago than a duration'))
    .requiredOption('--older-than <duration>', 'e.g. 365d', duration('--older-than'))
    .option('--dry-run', 'count what would be forgotten, forget nothing', false)
    .action((opts: Record<string, unknown>) => finish(opts, { kind: 'prune', olderThanMs: opts['olderThan'] as number, dryRun: opts['dryRun'] as boolean }));
  common(ledger.command('release').description('list purchases stuck on a paid call that never answered, or release them to be bought again'))
    .argument('[domain...]', 'companies to release (none: list them)')
    .option('--all', 'release every one listed', false)
    .action((domains: string[], opts: Record<string, unknown>) => finish(opts, { kind: 'release', domains, all: opts['all'] as boolean }));
  common(ledger.command('import').description('import journals written by enrich 0.1, so their companies are not bought again'))
    .argument('<journal...>', 'journal files (<input>.enrich-journal)')
    .action((journals: string[], opts: Record<string, unknown>) => finish(opts, { kind: 'import', journals }));
}

const SANDBOX_EXAMPLES = `
Examples:
  A local service for a demo, then a batch against it (in another terminal):
    $ enrich sandbox --port 4010 --key sk_demo
    $ export ENRICH_BASE_URL=http://127.0.0.1:4010 ENRICH_API_KEY=sk_demo
    $ enrich fixtures/companies.csv -o enriched.csv

  A harsh one, to see rate-limit pauses, retries and a 402 stop:
    $ enrich sandbox --rate-limit 20 --fail-rate 0.05 --drop-rate 0.01 \\
        --latency 50 --balance 100

  What real services do: answers that vary, a one-token bucket on a
  whole-millisecond clock, or a gateway counting per fixed second:
    $ enrich sandbox --rate-limit 500 --latency 100-300
    $ enrich sandbox --rate-limit 100 --burst 1 --clock-tick 1 \\
        --latency lognormal:20:0.8
    $ enrich sandbox --rate-limit 100 --fixed-window 1000
`;

const DOCTOR_EXAMPLES = `
Examples:
  Before putting a batch in cron, with the environment cron will have:
    $ ENRICH_BASE_URL=https://data.example.com ENRICH_API_KEY=... enrich doctor

  Also look for the rate ceiling (free matches only, at most 50):
    $ enrich doctor --probe-rate 50

  Try it without a service:
    $ enrich doctor --sandbox

Exit codes: 0 all ok · 2 usage (no address or key, a bad --store) ·
  5 key refused (401/403) · 6 the service cannot be reached · 1 anything else
`;

/**
 * The command line: `enrich <input>` (the batch, the default command) and `enrich sandbox`.
 * Parsing only: nothing here touches files or the network.
 */
export function parseCommandLine(argv: readonly string[], out: ProgramOutput, env: NodeJS.ProcessEnv): ParsedCommand {
  let parsed: ParsedCommand | undefined;
  const program = new Command('enrich')
    // `enrich doctor --sandbox`: a flag after a subcommand is that subcommand's, though the batch has one too.
    .enablePositionalOptions()
    .description(
      'Enrich a CSV of company domains: free match first, then pay only for companies found.\nEverything bought is kept in a local store: no company is bought twice, across runs and inputs.',
    )
    .version(VERSION, '-V, --version', 'print the version')
    .helpOption('-h, --help', 'show this help')
    .argument('[input]', 'CSV file to read, or - for stdin')
    .option('-o, --output <path>', 'where results go, - for stdout (the default; a dry run writes none unless given)', stdoutAlias)
    .addOption(new Option('--format <format>', 'results format (default: from the output extension, else csv)').choices(['csv', 'jsonl']))
    .option('--column <name>', 'the column holding domains (default: detected from the header)')
    .option('--dry-run', 'run the free matches only and report the exact cost; spends nothing', false)
    .option('--max-credits <n>', 'never spend more than n credits in this invocation', integer(0, Number.MAX_SAFE_INTEGER, '--max-credits'))
    .option('-y, --yes', 'on a terminal, buy more than 100 credits without asking first', false)
    .option('--overwrite', 'let a dry run replace an existing -o file', false)
    .option('--store <path>', 'the purchase store (env: ENRICH_STORE; default: $XDG_STATE_HOME/enrich/store.db)')
    .option('--max-age <duration>', 'buy again records bought longer ago than this, e.g. 30d (default: never)', duration('--max-age'))
    .option('--miss-max-age <duration>', 'ask again about domains that did not match longer ago than this (free; default 30d)', duration('--miss-max-age'))
    .option('--settle <duration>', 'how long a paid call whose answer was lost may still run at the service (default 60s)', duration('--settle'))
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
          store: opts['store'] as string | undefined,
          maxAgeMs: opts['maxAge'] as number | undefined,
          missMaxAgeMs: opts['missMaxAge'] as number | undefined,
          settleMs: opts['settle'] as number | undefined,
          journal: opts['journal'] as string | undefined,
          fresh: opts['fresh'] as boolean,
          concurrency: opts['concurrency'] as number,
          summaryJson: opts['summaryJson'] as string | undefined,
          baseUrl: opts['baseUrl'] as string | undefined,
          sandbox: opts['sandbox'] as boolean,
          apiKeyFile: opts['apiKeyFile'] as string | undefined,
          quiet: opts['quiet'] as boolean,
          progress: opts['progress'] as boolean | undefined,
          rawServiceText: opts['rawServiceText'] as boolean,
          overwrite: opts['overwrite'] as boolean,
          yes: opts['yes'] as boolean,
        },
      };
    });

  // Before the subcommand: commander copies these settings into a subcommand when it is created,
  // so `enrich sandbox --port abc` also answers with one line and exit 2, not process.exit(1).
  program
    .exitOverride()
    .configureOutput({
      writeOut: (s) => out.writeOut(s),
      writeErr: (s) => out.writeErr(s),
      outputError: (s, write) => write(`enrich: ${s.replace(/^error: /, '')}`),
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
    .option('--clock-tick <ms>', "the bucket's clock tick (1: whole milliseconds; default 0: exact)", integer(0, 60_000, '--clock-tick'), 0)
    .option('--fixed-window <ms>', 'count requests per fixed window of this many ms (--rate-limit x window each) instead of a bucket', integer(1, 3_600_000, '--fixed-window'))
    .addOption(new Option('--latency <spec>', 'delay before each answer: ms fixed, min-max uniform, or lognormal:median[:sigma[:max]]').argParser(latencySpec).default(fixedLatency(0), '0'))
    .option('--seed <n>', 'seed for the injected faults and latency draws', integer(0, 2 ** 31, '--seed'), 1)
    .addOption(
      new Option('--idempotency <mode>', 'what an Idempotency-Key stores: spec (200s only; a 402 or 500 stores nothing) or stripe (every outcome, replayed forever)')
        .choices(['spec', 'stripe'])
        .default('spec'),
    )
    .addOption(
      new Option('--replay-request-id <which>', 'the request id a replay carries: original, fresh (a new one each time) or none')
        .choices(['original', 'fresh', 'none'])
        .default('original'),
    )
    .addHelpText('after', SANDBOX_EXAMPLES)
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
          latency: opts['latency'] as LatencySpec,
          clockTickMs: opts['clockTick'] as number,
          fixedWindowMs: opts['fixedWindow'] as number | undefined,
          seed: opts['seed'] as number,
          idempotency: opts['idempotency'] as SandboxCommandOptions['idempotency'],
          replayRequestId: opts['replayRequestId'] as SandboxCommandOptions['replayRequestId'],
        },
      };
    });

  addLedgerCommands(program, (options) => (parsed = { kind: 'ledger', options }));

  program
    .command('doctor')
    .description('check that a batch would work here: the service, the key, the endpoints, latency, the store')
    .option('--base-url <url>', 'service address (env: ENRICH_BASE_URL)')
    .option('--sandbox', 'check against an embedded sandbox started in-process', false)
    .option('--api-key-file <path>', 'read the API key from a file instead of ENRICH_API_KEY')
    .option('--store <path>', 'the purchase store (env: ENRICH_STORE; default: in $XDG_STATE_HOME/enrich)')
    .option('--probe-rate [requests]', 'also look for the rate ceiling with up to this many free matches (default 100)', integer(1, 1_000, '--probe-rate'))
    .option('--json', 'the report as JSON', false)
    .addHelpText('after', DOCTOR_EXAMPLES)
    .action((opts: Record<string, unknown>) => {
      const probe = opts['probeRate'] as number | true | undefined;
      parsed = {
        kind: 'doctor',
        flags: {
          baseUrl: opts['baseUrl'] as string | undefined,
          sandbox: opts['sandbox'] as boolean,
          apiKeyFile: opts['apiKeyFile'] as string | undefined,
          store: opts['store'] as string | undefined,
          probeRate: probe === undefined ? null : probe === true ? 100 : probe,
          json: opts['json'] as boolean,
        },
      };
    });

  // Subcommands inherit these only if set before they are created: set them on each, so that
  // every refusal is one line, `enrich: ...` with the help to read, and exit 2.
  const every = (command: Command, path: string): [Command, string][] => [[command, path], ...command.commands.flatMap((c) => every(c, `${path} ${c.name()}`))];
  for (const [command, path] of every(program, 'enrich')) {
    // `enrich ledger show` is `enrich ledger` (its default): the help to read is the ledger's.
    const help = `${path.replace(/ show$/, '')} --help`;
    command.exitOverride().configureOutput({
      writeOut: (s) => out.writeOut(s),
      writeErr: (s) => out.writeErr(s),
      outputError: (s, write) => write(`enrich: ${refusal(s, path)} (see ${help})\n`),
    });
  }

  const refused = keyOnCommandLine(argv);
  if (refused !== null) {
    out.writeErr(`enrich: ${refused}\n`);
    return { kind: 'exit', exitCode: 2 };
  }
  try {
    program.parse(helpAsFlag(argv), { from: 'user' });
  } catch (error) {
    if (error instanceof CommanderError) {
      const ok = error.code === 'commander.helpDisplayed' || error.code === 'commander.version' || error.code === 'commander.help';
      return { kind: 'exit', exitCode: ok ? 0 : 2 };
    }
    throw error;
  }
  return parsed ?? { kind: 'exit', exitCode: 2 };
}
