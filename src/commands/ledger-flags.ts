import { Option, type Command } from 'commander';
import type { LedgerAction } from './ledger.js';
import type { SpendBy } from '../store/ledger-types.js';
import { suggestCommand } from '../cli/suggest.js';
import { MAX_CAP } from '../store/budget.js';
import { duration, integer, stdoutAlias } from './values.js';

/** `enrich ledger ...`: the store is resolved from --store / ENRICH_STORE in cli/main.ts. */
export interface LedgerFlags {
  store: string | undefined;
  json: boolean;
  action: LedgerAction;
}

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
  Credits spent, by month (UTC), by person or by input:
    $ enrich ledger spend --by person
  Merge this machine's store into the team's (nothing is bought again):
    $ enrich ledger copy ~/.local/state/enrich/store.db postgres://db/enrich

Every command works on either store: --store <path> (SQLite, one person's;
\`sqlite3\` reads it too) or --store postgres://... (the team's).
See docs/store-and-resume.md and docs/team.md.
`;

const LEDGER_COMMANDS = ['show', 'runs', 'export', 'prune', 'release', 'import', 'spend', 'copy'] as const;
const SPEND_BY: readonly SpendBy[] = ['month', 'person', 'input'];

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

/** The options every ledger and budget command takes, and its flags from them. */
const common = (c: Command): Command => c.option('--store <path>', 'the purchase store (env: ENRICH_STORE)').option('--json', 'machine-readable output', false);
const finishing =
  (done: (options: LedgerFlags) => void) =>
  (opts: Record<string, unknown>, action: LedgerAction): void =>
    done({ store: opts['store'] as string | undefined, json: opts['json'] as boolean, action });

const BUDGET_EXAMPLES = `
Examples:
  This month's caps, spent and held:    $ enrich budget
  Cap the store (a team store: the team) at 5,000 credits a month:
    $ enrich budget set 5000
  Cap one person at 500 (ENRICH_USER, else the login name):
    $ enrich budget set 500 --person alice
  Remove a cap:                         $ enrich budget clear --person alice

A month is the calendar month in UTC, by the store's clock. A run that meets a cap
stops (exit 4) and resumes once there is room. See docs/budgets.md.
`;

/** `enrich budget [set <credits> | clear] [--person <name>]`: monthly caps, kept in the store. */
export function defineBudget(program: Command, done: (options: LedgerFlags) => void): void {
  const budget = program.command('budget').description('monthly caps on credits: the store\'s (the team\'s) and each person\'s').addHelpText('after', BUDGET_EXAMPLES);
  const finish = finishing(done);
  common(budget.command('show', { isDefault: true }).description("this month's caps: spent, held by calls in flight, left")).action((opts: Record<string, unknown>) => finish(opts, { kind: 'budget' }));
  common(budget.command('set').description("set the store's monthly cap, or a person's"))
    .argument('<credits>', 'credits a month', integer(0, MAX_CAP, '<credits>'))
    .option('--person <name>', "a person's cap (as ENRICH_USER, else the login name, names them)")
    .action((credits: number, opts: Record<string, unknown>) => finish(opts, { kind: 'budget', change: { person: (opts['person'] as string | undefined) ?? null, credits } }));
  common(budget.command('clear').description("remove the store's monthly cap, or a person's"))
    .option('--person <name>', "a person's cap")
    .action((opts: Record<string, unknown>) => finish(opts, { kind: 'budget', change: { person: (opts['person'] as string | undefined) ?? null, credits: null } }));
}

/** `enrich ledger [show|runs|export|prune|release|import|spend|copy]`: inspect and own what the store holds. */
export function defineLedger(program: Command, done: (options: LedgerFlags) => void): void {
  const ledger = program
    .command('ledger')
    .description('show, export, prune, spend and copy what the purchase store holds')
    .addHelpText('after', LEDGER_EXAMPLES);
  const finish = finishing(done);
  common(ledger.command('show', { isDefault: true }).description('companies held, credits spent, oldest record, size on disk'))
    // The default: `enrich ledger bogus` (or `prnue --older-than 3d`) is a mistyped command, not an argument nor an option of show's.
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
  common(ledger.command('spend').description('credits spent: by month (UTC), by person (user@host) or by input; totals'))
    .addOption(new Option('--by <group>', 'month, person or input').choices(SPEND_BY).default('month'))
    .action((opts: Record<string, unknown>) => finish(opts, { kind: 'spend', by: opts['by'] as SpendBy }));
  ledger
    .command('copy')
    .description('merge one store into another (a laptop\'s into the team\'s): records, lookups, purchases and runs, nothing bought or counted twice')
    .argument('<from>', 'the store to copy from (a path or a postgres:// address); only read')
    .argument('<to>', 'the store to copy into (made if it is not there)')
    .option('--dry-run', 'count what would be copied, write nothing', false)
    .option('--json', 'machine-readable output', false)
    .action((from: string, to: string, opts: Record<string, unknown>) => done({ store: undefined, json: opts['json'] as boolean, action: { kind: 'copy', from, to, dryRun: opts['dryRun'] as boolean } }));
}
