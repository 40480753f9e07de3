import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { fileIdentity, inheritedDescriptor, plantedLink, statOrNull } from '../io/paths.js';
import { outputTarget, unwritableReason } from '../io/sink.js';
import { DEFAULT_DEADLINE_MS } from '../api/client.js';
import { DEFAULT_SETTLE_MS } from '../pipeline/run-purchase.js';
import { UsageError } from '../errors.js';
import type { RunOptions, ServiceTarget } from '../commands/run.js';
import { DEFAULT_MISS_MAX_AGE_MS } from '../pipeline/plan.js';
import { checkStoreFolder, isTeamStore, resolveStorePath, sandboxStorePath, storeFolderProblem } from '../store/path.js';
import type { OutputFormat } from '../io/output.js';
import { SUBCOMMANDS, type DoctorFlags, type RunFlags } from './program.js';
import type { DoctorOptions } from '../commands/doctor.js';
import { suggestCommand } from './suggest.js';

/** What `--sandbox` starts: a realistic service (rate limited, a little flaky) with credits to spare. */
export const EMBEDDED_SANDBOX = { balance: 10_000, rateLimit: 100, latencyMs: 20, failRate: 0.02, seed: 1 } as const;

const LOOPBACK = /^(localhost|127(\.\d{1,3}){3}|\[::1\])$/i;

export function checkBaseUrl(raw: string): string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new UsageError(`the service address "${raw}" is not a URL (expected e.g. https://data.example.com)`);
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') throw new UsageError(`the service address must be https:// (got ${url.protocol})`);
  if (url.protocol === 'http:' && !LOOPBACK.test(url.hostname)) {
    throw new UsageError(`refusing to send the API key over plain http to ${url.hostname}; use https:// (plain http is allowed only to this machine)`);
  }
  if (url.username !== '' || url.password !== '') throw new UsageError('the service address must not carry credentials; use ENRICH_API_KEY');
  return url.toString();
}

export async function readApiKey(flags: Pick<RunFlags, 'apiKeyFile'>, env: NodeJS.ProcessEnv): Promise<string> {
  let key: string | undefined;
  let source: string;
  if (flags.apiKeyFile !== undefined) {
    source = flags.apiKeyFile;
    try {
      key = (await readFile(flags.apiKeyFile, 'utf8')).split(/\r?\n/)[0]?.trim();
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      const why = code === 'ENOENT' ? 'no such file' : code === 'EISDIR' ? 'it is a directory' : code === 'EACCES' ? 'permission denied' : (code ?? String(error));
      throw new UsageError(`cannot read the API key file ${flags.apiKeyFile}: ${why}`);
    }
  } else {
    source = 'ENRICH_API_KEY';
    key = env['ENRICH_API_KEY']?.trim();
  }
  if (key === undefined || key === '') {
    throw new UsageError(
      flags.apiKeyFile === undefined
        ? 'no API key: set ENRICH_API_KEY or pass --api-key-file <path> (or try --sandbox)'
        : `the API key file ${source} is empty`,
    );
  }
  if (/\s/.test(key)) throw new UsageError(`the API key from ${source} contains whitespace; check it was copied whole`);
  // It goes in an HTTP header (printable ASCII only): anything else would fail every request as a "network error". Never shown.
  if (/[^\x21-\x7e]/.test(key)) {
    throw new UsageError(`the API key from ${source} contains a non-ASCII or control character; check it was copied whole (the key is not shown)`);
  }
  return key;
}

export function formatFor(output: string, requested: OutputFormat | undefined): OutputFormat {
  if (requested !== undefined) return requested;
  return /\.(jsonl|ndjson)$/i.test(output) ? 'jsonl' : 'csv';
}

/** Refuses before any work the paths that would fail or destroy something only once it is done: results over the input or the store, a directory, a missing folder. */
function checkPaths(flags: RunFlags, store: string, env: NodeJS.ProcessEnv): void {
  const output = flags.output ?? '-';
  const files: [string, string][] = [];
  if (flags.input !== '-') files.push(['the input', flags.input]);
  const team = isTeamStore(store);
  if (!team) files.push(['the store', store], ['the store\'s log', `${store}-wal`], ['the store\'s index', `${store}-shm`]);
  if (flags.journal !== undefined) files.push(['--journal', flags.journal]);
  if (output !== '-') files.push(['-o', output]);
  if (flags.summaryJson !== undefined && flags.summaryJson !== '-') files.push(['--summary-json', flags.summaryJson]);
  const seen = new Map<string, string>();
  for (const [role, path] of files) {
    // The file, not its name: a hard link of the input or the store is that file too.
    const key = fileIdentity(path);
    const other = seen.get(key);
    if (other !== undefined) throw new UsageError(`${role} and ${other} are the same file (${path}); give each its own path`);
    seen.set(key, role);
  }
  if (flags.journal !== undefined) {
    const info = statOrNull(flags.journal);
    if (info === null) throw new UsageError(`--journal ${flags.journal}: no such file`);
    if (info.isDirectory()) throw new UsageError(`--journal ${flags.journal} is a directory; give the path of a journal written by enrich 0.1`);
  }
  if (!team && statOrNull(store)?.isDirectory() === true) {
    throw new UsageError(`the store ${store} is a directory; give a file path with --store or ENRICH_STORE`);
  }
  checkStoreFolder(store, env);
  for (const [flag, path] of [['-o', output], ['--summary-json', flags.summaryJson]] as const) {
    if (path === undefined || path === '-') continue;
    if (inheritedDescriptor(path) !== null) continue;
    const planted = plantedLink(path);
    if (planted !== null) throw new UsageError(`${flag} ${planted}`);
    // Where the results will land (a symlink's target): checked now, before anything is bought.
    const { target, viaLink } = outputTarget(path);
    const reason = unwritableReason(target);
    if (reason !== null) throw new UsageError(`${flag} ${reason}${viaLink ? ` (${path} is a link there)` : ''}`);
  }
}

/** `enrich sandox`: a mistyped subcommand reads as an input file; a file that exists wins. */
function checkNotACommand(input: string): void {
  if (statOrNull(input) !== null) return;
  const command = suggestCommand(input, SUBCOMMANDS);
  if (command !== null) throw new UsageError(`no such file or command: ${input}; did you mean \`enrich ${command}\`?`);
  // A bare word (`enrich status`) is neither a file nor a command: said before any setting is asked for.
  if (/^[A-Za-z][A-Za-z0-9_-]*$/.test(input)) throw new UsageError(`no such file or command: ${input}; the commands are ${SUBCOMMANDS.join(', ')} (enrich --help), and an input is a CSV file or - for stdin`);
}

const WORKBOOK = /\.(xlsx|xlsm|xlsb|xls|ods|numbers)$/i;

/** A spreadsheet workbook is not CSV, in or out: say what to do instead. */
function checkNotAWorkbook(flags: RunFlags): void {
  if (WORKBOOK.test(flags.input)) {
    throw new UsageError(`${flags.input} is a spreadsheet workbook, not CSV: export it as CSV (in Excel: File > Save As > CSV UTF-8) and give that file`);
  }
  if (flags.output !== undefined && WORKBOOK.test(flags.output)) {
    throw new UsageError(`-o ${flags.output}: enrich writes CSV or JSONL, which a spreadsheet refuses under that name; give -o ${flags.output.replace(WORKBOOK, '.csv')} (Excel opens it)`);
  }
}

/** A request may run at the service as long as the client waits for it: a shorter settle retires a key whose call may still be charged, and the company is paid twice. */
const seconds = (ms: number): string => `${Math.ceil(ms / 1000)}s`;
/** The longest request deadline: far past any real answer, and far inside a timer's range. */
const MAX_TIMEOUT_MS = 3_600_000;

function checkSettle(flags: RunFlags): void {
  if (flags.timeout !== undefined && (flags.timeout < 1000 || flags.timeout > MAX_TIMEOUT_MS)) throw new UsageError('--timeout: give from 1s to 1h');
  const deadline = flags.timeout ?? DEFAULT_DEADLINE_MS;
  if (flags.settle !== undefined && flags.settle < deadline) {
    throw new UsageError(
      `--settle ${seconds(flags.settle)} is shorter than a request may take (--timeout ${seconds(deadline)}): a paid call whose answer was lost may still be running, and retiring its key then can pay twice; give --settle ${seconds(deadline)} or more (or a shorter --timeout)`,
    );
  }
}

/** Flags and environment -> the batch's options. Every refusal is a one-line UsageError (exit 2). */
export async function resolveRunOptions(flags: RunFlags, env: NodeJS.ProcessEnv): Promise<RunOptions> {
  checkNotACommand(flags.input);
  checkNotAWorkbook(flags);
  if (flags.sandbox && flags.baseUrl !== undefined) throw new UsageError('--sandbox and --base-url exclude each other');
  if (flags.fresh && flags.maxAge !== undefined) throw new UsageError('--fresh and --max-age exclude each other (--fresh is --max-age 0)');
  checkSettle(flags);
  let service: ServiceTarget;
  if (flags.sandbox) {
    service = { kind: 'sandbox', options: { ...EMBEDDED_SANDBOX } };
  } else {
    const raw = flags.baseUrl ?? env['ENRICH_BASE_URL'];
    if (raw === undefined || raw.trim() === '') {
      throw new UsageError('no service address: set ENRICH_BASE_URL or pass --base-url <url> (or --sandbox to try the embedded sandbox)');
    }
    service = { kind: 'remote', baseUrl: checkBaseUrl(raw.trim()), apiKey: await readApiKey(flags, env) };
  }
  // The embedded sandbox buys with play credits: into a store of its own unless --store names one (ENRICH_STORE names the real store).
  const store = service.kind === 'sandbox' && (flags.store === undefined || flags.store === '') ? sandboxStorePath(env) : resolveStorePath(flags.store, env);
  checkPaths(flags, store, env);
  const output = flags.output ?? '-';
  const writesOutput = !flags.dryRun || flags.output !== undefined;
  // A dry run writes estimates: replacing last night's results (or a real run's totals a cron check reads) takes --overwrite.
  for (const [flag, path] of [['-o', output], ['--summary-json', flags.summaryJson ?? '-']] as const) {
    if (flags.dryRun && path !== '-' && !flags.overwrite && inheritedDescriptor(path) === null && statOrNull(path)?.isFile() === true) {
      if (flag === '--summary-json' && dryRunTotals(path)) continue;
      throw new UsageError(`${path} exists, and a dry run would replace it with estimates; give another ${flag}, or add --overwrite`);
    }
  }
  if (flags.summaryJson === '-' && output === '-' && writesOutput) {
    throw new UsageError('--summary-json - needs -o <file> (or --dry-run): stdout already carries the results');
  }
  return {
    input: flags.input,
    output,
    writesOutput,
    format: formatFor(output, flags.format),
    column: flags.column,
    dryRun: flags.dryRun,
    maxCredits: flags.maxCredits ?? null,
    store,
    maxAgeMs: flags.fresh ? 0 : (flags.maxAge ?? null),
    missMaxAgeMs: flags.missMaxAge ?? DEFAULT_MISS_MAX_AGE_MS,
    // Unsaid, the settle is the default minute, or the request deadline where that is longer.
    settleMs: flags.settle ?? (flags.timeout !== undefined && flags.timeout > DEFAULT_SETTLE_MS ? flags.timeout : null),
    requestDeadlineMs: flags.timeout ?? null,
    journal: flags.journal,
    concurrency: flags.concurrency,
    service,
    rawServiceText: flags.rawServiceText,
    confirm: !flags.yes,
  };
}

const problemOf = (error: unknown): string => {
  if (error instanceof UsageError) return error.message;
  throw error;
};

/** The store doctor checks, or why none can be named by what was given (a report line, not a refusal). */
function storeAddress(flags: DoctorFlags, env: NodeJS.ProcessEnv): Pick<DoctorOptions, 'storePath' | 'storeFolder' | 'storeProblem'> {
  try {
    const storePath = resolveStorePath(flags.store, env);
    return { storePath, storeFolder: storeFolderProblem(storePath, env), storeProblem: null };
  } catch (error) {
    return { storePath: flags.store ?? env['ENRICH_STORE'] ?? '', storeFolder: null, storeProblem: problemOf(error) };
  }
}

/** Doctor's flags -> its options. Nothing is refused here: each problem becomes a report line. */
export async function resolveDoctorOptions(flags: DoctorFlags, env: NodeJS.ProcessEnv): Promise<DoctorOptions> {
  const store = storeAddress(flags, env);
  const common = { ...store, probeRate: flags.probeRate, timeoutMs: 10_000, json: flags.json };
  if (flags.sandbox && flags.baseUrl !== undefined) throw new UsageError('--sandbox and --base-url exclude each other');
  if (flags.sandbox) return { ...common, service: { kind: 'sandbox', options: { ...EMBEDDED_SANDBOX, failRate: 0 } } };
  const raw = (flags.baseUrl ?? env['ENRICH_BASE_URL'] ?? '').trim();
  let address: Extract<DoctorOptions['service'], { kind: 'remote' }>['address'];
  if (raw === '') address = { ok: false, problem: 'no service address: set ENRICH_BASE_URL or pass --base-url <url> (or --sandbox)' };
  else {
    try {
      address = { ok: true, url: checkBaseUrl(raw) };
    } catch (error) {
      address = { ok: false, problem: problemOf(error) };
    }
  }
  const key = await readApiKey(flags, env).then(
    (value) => ({ ok: true as const, value }),
    (error: unknown) => ({ ok: false as const, problem: problemOf(error) }),
  );
  return { ...common, service: { kind: 'remote', address, key } };
}

/** Whether the file at `path` holds the summary JSON of a dry run (which another dry run may replace). */
function dryRunTotals(path: string): boolean {
  if ((statOrNull(path)?.size ?? Infinity) > 1_000_000) return false;
  try {
    return (JSON.parse(readFileSync(path, 'utf8')) as { dry_run?: unknown }).dry_run === true;
  } catch {
    return false;
  }
}
