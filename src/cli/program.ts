import { Command, CommanderError } from 'commander';
import { VERSION } from '../version.js';
import type { SandboxCommandOptions } from '../commands/sandbox.js';
import { defineDoctor, type DoctorFlags } from '../commands/doctor-flags.js';
import { defineBudget, defineLedger, type LedgerFlags } from '../commands/ledger-flags.js';
import { defineRun, type RunFlags } from '../commands/run-flags.js';
import { defineSandbox } from '../commands/sandbox-flags.js';

export type { RunFlags } from '../commands/run-flags.js';
export type { DoctorFlags } from '../commands/doctor-flags.js';
export type { LedgerFlags } from '../commands/ledger-flags.js';

/** `--api-key sk_...` is refused before parsing, so the value is never echoed back (commander would print it), with where a key does go. */
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

/** Commander's refusal as one line with a fix: the suggestion on the same line, an unknown option's value never shown, no `--column` offered for `--color`. */
function refusal(message: string, path: string): string {
  let text = message.trim().replace(/^error: /, '');
  text = text.replace(/unknown option '(--[^=']+)=[^']*'/, "unknown option '$1=…'");
  if (path === 'enrich' && /^unknown option '--json\b/.test(text)) {
    return "unknown option '--json': a batch writes its totals as JSON with --summary-json <path|-> and its rows as JSON lines with --format jsonl";
  }
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
export const SUBCOMMANDS = ['sandbox', 'doctor', 'ledger', 'budget'] as const;

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

/** The command line: the batch (the default command) and its subcommands. Parsing only: nothing here touches files or the network. */
export function parseCommandLine(argv: readonly string[], out: ProgramOutput, env: NodeJS.ProcessEnv): ParsedCommand {
  let parsed: ParsedCommand | undefined;
  const program = new Command('enrich')
    // `enrich doctor --sandbox`: a flag after a subcommand is that subcommand's, though the batch has one too.
    .enablePositionalOptions()
    .description(
      'Enrich a CSV of company domains: free match first, then pay only for companies found.\nEverything bought is kept in a local store: no company is bought twice, across runs and inputs.',
    )
    .version(VERSION, '-V, --version', 'print the version')
    .helpOption('-h, --help', 'show this help');
  defineRun(program, (flags) => (parsed = { kind: 'run', flags }));

  // Before the subcommands: commander copies these into a subcommand when it is created (`enrich sandbox --port abc`: one line, exit 2).
  program
    .exitOverride()
    .configureOutput({
      writeOut: (s) => out.writeOut(s),
      writeErr: (s) => out.writeErr(s),
      outputError: (s, write) => write(`enrich: ${s.replace(/^error: /, '')}`),
    });

  defineSandbox(program, env, (options) => (parsed = { kind: 'sandbox', options }));
  defineLedger(program, (options) => (parsed = { kind: 'ledger', options }));
  defineBudget(program, (options) => (parsed = { kind: 'ledger', options }));
  defineDoctor(program, (flags) => (parsed = { kind: 'doctor', flags }));

  // Set on each command too, so every refusal is one line, `enrich: ...` with the help to read, and exit 2.
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
