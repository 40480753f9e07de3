import { stringify } from 'csv-stringify/sync';
import { serviceIdentity } from '../api/endpoint.js';
import { UsageError } from '../errors.js';
import { fileIdentity, plantedLink, statOrNull } from '../io/paths.js';
import { openSink, unwritableReason } from '../io/sink.js';
import { neutraliseCell, stripControls } from '../io/service-text.js';
import { importJournal, looksLikeJournal, notJournal } from '../store/import-journal.js';
import type { HeldRecord, LedgerStore, SpendBy } from '../store/ledger-types.js';
import { openLedgerStore } from '../store/open.js';
import { isTeamStore } from '../store/path.js';
import { count, num } from '../ui/format.js';
import { formatBytes } from './doctor-checks.js';
import { day, formatTable, iso, stamp } from './ledger-format.js';
import { copyStores } from './ledger-copy.js';
import { showSpend } from './ledger-spend.js';
import { budgetCommand, budgetJson, type BudgetAction } from './budget.js';
import { budgetView } from '../store/budget.js';
import { VERSION } from '../version.js';

export type LedgerAction =
  | { kind: 'show' }
  | { kind: 'runs'; limit: number }
  | { kind: 'export'; format: 'csv' | 'jsonl'; output: string; service: string | undefined }
  | { kind: 'prune'; olderThanMs: number; dryRun: boolean }
  | { kind: 'import'; journals: string[] }
  | { kind: 'release'; domains: string[]; all: boolean }
  | { kind: 'spend'; by: SpendBy }
  /** `from` and `to` are store addresses, checked as --store's are. */
  | { kind: 'copy'; from: string; to: string; dryRun: boolean }
  /** `enrich budget`: the monthly caps (commands/budget.ts). */
  | BudgetAction;

export interface LedgerOptions {
  store: string;
  /** The store is the default one (no --store, no ENRICH_STORE): its absence means a fresh machine. */
  isDefault?: boolean;
  json: boolean;
  action: LedgerAction;
}

export interface LedgerIO {
  stdout: NodeJS.WritableStream;
  /** ENRICH_HOST (who this machine is among a store's runs); the process's own by default. */
  env?: NodeJS.ProcessEnv;
  now?: () => number;
  /** Said on stderr while the ledger waits (a run whose clock is ahead is watched). */
  note?: (text: string) => void;
  sleep?: (ms: number) => Promise<void>;
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Before judging which runs are alive (release, prune): runs whose clock is ahead are watched first (one person's store). */
function watchSkewed(store: LedgerStore, io: LedgerIO): Promise<void> {
  const note = (n: number, ms: number): void =>
    io.note?.(`${count(n, 'run on another host has', 'runs on other hosts have')} a heartbeat ahead of this host's clock: watching for up to ${ms / 1000} s whether it still beats`);
  return store.settleClocks({ note, sleep: io.sleep ?? sleep });
}

/** `enrich ledger ...`: what the store holds, its runs, every record, what was spent, and housekeeping. */
export async function ledger(options: LedgerOptions, io: LedgerIO): Promise<void> {
  const print = (text: string): void => void io.stdout.write(text.endsWith('\n') ? text : `${text}\n`);
  const how = { tool: `enrich/${VERSION}`, ...(io.now === undefined ? {} : { now: io.now }), env: io.env ?? process.env };
  if (options.action.kind === 'copy') return copyStores(options.action, options.json, how, print);
  // A file that is not there (or empty) is no store; a team store's database is checked when opened.
  if (!isTeamStore(options.store) && missingFile(options, io)) return;
  // Every journal is checked before the store is opened (and perhaps made): a refused import leaves nothing behind.
  if (options.action.kind === 'import') {
    for (const path of options.action.journals) {
      const info = statOrNull(path);
      if (info === null) throw new UsageError(`${path}: no such file`);
      if (!info.isFile()) throw new UsageError(`${path} is not a file; give the path of a journal written by enrich 0.1`);
      if (!(await looksLikeJournal(path))) throw new UsageError(notJournal(path));
    }
  }
  const store = await openLedgerStore(options.store, { ...how, write: !readsOnly(options.action), create: options.action.kind === 'import' || setsBudget(options.action) });
  try {
    return await act(store, options, print, io);
  } catch (error) {
    throw store.explain(error);
  } finally {
    await store.close();
  }
}

/** Only an import may start a one-person store: a mistyped --store would be created empty and reported as holding nothing (an empty file is no store either). True when answered here (a fresh machine's default store). */
function missingFile(options: LedgerOptions, io: LedgerIO): boolean {
  const found = statOrNull(options.store);
  // A fresh machine: nothing bought yet is an answer, not an error. A named store that is not
  // there is still refused below: a mistyped --store must not read as an empty one.
  if (options.action.kind === 'show' && found === null && options.isDefault === true) {
    if (options.json) io.stdout.write(`${JSON.stringify({ store: options.store, bytes: 0, services: [] }, null, 2)}\n`);
    else io.stdout.write(`store      ${options.store} (none yet: the first batch run creates it)\n`);
    return true;
  }
  if (options.action.kind === 'budget' && !setsBudget(options.action) && found === null && options.isDefault === true) {
    if (options.json) io.stdout.write(`${JSON.stringify(budgetJson(budgetView(io.now?.() ?? Date.now(), [], []), options.store, false), null, 2)}\n`);
    else io.stdout.write(`no monthly budget is set (no store at ${options.store} yet); set one with \`enrich budget set <credits>\`\n`);
    return true;
  }
  if (options.action.kind !== 'import' && !setsBudget(options.action) && (found === null || (found.isFile() && found.size === 0))) {
    throw new UsageError(`no store at ${options.store}: a batch run creates it with its first purchase or lookup; give --store <path> (or ENRICH_STORE) to read another`);
  }
  return false;
}

/** Read-only actions open the store read-only: they work on a read-only mount and beside a run, taking no write lock. */
function readsOnly(action: LedgerAction): boolean {
  switch (action.kind) {
    case 'show':
    case 'runs':
    case 'export':
    case 'spend':
      return true;
    case 'prune':
      return action.dryRun;
    case 'release':
      return !action.all && action.domains.length === 0;
    case 'budget':
      return !setsBudget(action);
    case 'import':
    case 'copy':
      return false;
  }
}

/** `enrich budget set` and `clear` write (and may make a store, so a cap can come before the first run). */
const setsBudget = (action: LedgerAction): boolean => action.kind === 'budget' && action.change !== undefined;

async function act(store: LedgerStore, options: LedgerOptions, print: (s: string) => void, io: LedgerIO): Promise<void> {
  const action = options.action;
  switch (action.kind) {
    case 'show':
      return show(store, options.json, print);
    case 'runs':
      return listRuns(store, action.limit, options.json, print);
    case 'spend':
      return showSpend(await store.spend(action.by), action.by, store.shown, options.json, print);
    case 'copy':
      return;
    case 'budget':
      return budgetCommand(store, action, isTeamStore(options.store), options.json, io.env ?? process.env, print);
    case 'export':
      return await exportRecords(store, action, io.stdout);
    case 'prune': {
      if (!action.dryRun) await watchSkewed(store, io);
      const cutoff = store.now() - action.olderThanMs;
      const pruned = await store.prune(cutoff, action.dryRun);
      if (options.json) return print(JSON.stringify({ cutoff: new Date(cutoff).toISOString(), dry_run: action.dryRun, ...pruned }));
      const verb = action.dryRun ? 'would forget' : 'forgot';
      return print(`${verb} ${count(pruned.companies, 'company', 'companies')} bought and ${count(pruned.lookups, 'lookup')} made before ${stamp(cutoff)} UTC; open purchases are always kept`);
    }
    case 'release':
      await watchSkewed(store, io);
      return await releaseHeld(store, action, options.json, print);
    case 'import':
      for (const path of action.journals) {
        const imported = await importJournal(store, path);
        if (imported === 'not_journal') throw new UsageError(notJournal(path));
        print(imported === null ? `${path}: nothing new to import` : `${path}: imported ${count(imported.companies, 'company', 'companies')} for ${imported.service}`);
      }
      return;
  }
}

/** `enrich ledger release`: the one explicit way out for a company whose paid call never answered. */
async function releaseHeld(store: LedgerStore, action: Extract<LedgerAction, { kind: 'release' }>, json: boolean, print: (s: string) => void): Promise<void> {
  if (!action.all && action.domains.length === 0) {
    const held = await store.atRisk([]);
    if (json) {
      const rows = held.map((p) => ({ service: p.service, domain: p.domain, generation: p.generation, key_version: p.keyVersion, error_code: p.errorCode, lost_at: iso(p.lostAt), resumed: p.tried }));
      return print(JSON.stringify({ store: store.shown, at_risk: rows }, null, 2));
    }
    if (held.length === 0) return print('no purchase is waiting on an unanswered paid call');
    print(held.map((p) => `${p.domain}  (${p.service}; ${p.tried ? `last error ${p.errorCode ?? 'none'}` : 'never resumed here'}${p.lostAt === null ? '' : `; unanswered since ${stamp(p.lostAt)}`})`).join('\n'));
    const untried = held.filter((p) => !p.tried).length;
    const note = untried === 0 ? '' : `; ${count(untried, 'of them was', 'of them were')} never resumed here (no later run here has taken its key up again; or it was copied in): the next run resumes ${untried === 1 ? 'it' : 'them'} under the same key, a charged one replayed for free, so --all leaves ${untried === 1 ? 'it' : 'them'}`;
    return print(`${count(held.length, 'company waits', 'companies wait')} on a paid call whose answer never came: at most ${count(held.length, 'credit')} at risk${note}. Rerun first; if the service never answers for them, release them with --all or by name (each may then be charged twice)`);
  }
  // --all: only keys a run here tried to resume and got no answer for; one never resumed is released only by name.
  const listed = await store.atRisk(action.all ? [] : action.domains);
  const held = action.all ? listed.filter((p) => p.tried) : listed;
  const unknown = action.domains.filter((d) => !held.some((p) => p.domain === d));
  if (unknown.length > 0) throw new UsageError(`nothing to release for ${unknown.join(', ')}: no unanswered paid call is held for it (see \`enrich ledger release\`)`);
  // What was released, not what was listed: a run may have claimed some of them meanwhile.
  const released = await store.release(held);
  const untried = listed.length - held.length;
  if (json) return print(JSON.stringify({ released: released.map((p) => p.domain), ...(untried > 0 ? { left_to_resume: listed.filter((p) => !p.tried).map((p) => p.domain) } : {}) }));
  const left = held.length - released.length;
  const claimed = left === 0 ? '' : `; ${count(left, 'other was', 'others were')} claimed by a run meanwhile, and left to it`;
  const resume = untried === 0 ? '' : `; ${count(untried, 'company was', 'companies were')} never resumed here and ${untried === 1 ? 'is' : 'are'} left for the next run to resume under ${untried === 1 ? 'its key' : 'their keys'} (name ${untried === 1 ? 'it' : 'one'} to release it anyway)`;
  print(`released ${count(released.length, 'company', 'companies')}: the next run buys ${released.length === 1 ? 'it under a new key' : 'them under new keys'}; if a lost call was charged after all, that company is charged twice (at most ${count(released.length, 'credit')})${claimed}${resume}`);
}

async function show(store: LedgerStore, json: boolean, print: (s: string) => void): Promise<void> {
  const services = await store.holdings();
  const size = await store.size();
  if (json) {
    const json = services.map((s) => ({
      service: s.service,
      companies: s.companies,
      lookups: s.lookups,
      misses: s.misses,
      credits: s.credits,
      runs: s.runs,
      at_risk: s.open,
      credits_unconfirmed: s.unconfirmed,
      oldest_bought_at: iso(s.oldest),
      newest_bought_at: iso(s.newest),
    }));
    print(JSON.stringify({ store: store.shown, bytes: size, services: json }, null, 2));
    return;
  }
  const lines = [`store      ${store.shown} (${formatBytes(size)}${store.sizeNote === '' ? '' : ` ${store.sizeNote}`})`];
  if (services.length === 0) lines.push('           empty: nothing bought yet');
  for (const s of services) {
    lines.push(
      '',
      `service    ${s.service}`,
      `companies  ${num(s.companies)} held, bought ${day(s.oldest)} to ${day(s.newest)}`,
      `lookups    ${count(s.lookups, 'domain')} (${num(s.misses)} no match)`,
      `credits    ${num(s.credits)} spent over ${count(s.runs, 'run')}`,
    );
    if (s.open > 0) lines.push(`at risk    ${count(s.open, 'purchase')} unfinished (a rerun finishes ${s.open === 1 ? 'it under its own key' : 'them under their own keys'})`);
    if (s.unconfirmed > 0) {
      lines.push(`unconfirmed up to ${count(s.unconfirmed, 'credit')} more may have been charged: ${s.unconfirmed === 1 ? 'a key' : 'keys'} whose answer was lost, then answered only with errors, retired after --settle`);
    }
  }
  print(lines.join('\n'));
}

async function listRuns(store: LedgerStore, limit: number, json: boolean, print: (s: string) => void): Promise<void> {
  const list = await store.runs(limit);
  if (json) {
    const rows = list.map((r) => ({
      id: r.id,
      service: r.service,
      started_at: iso(r.startedAt),
      ended_at: iso(r.endedAt),
      input: r.input,
      rows: r.rows,
      dry_run: r.dryRun,
      status: r.status,
      credits: r.credits,
      bought: r.bought,
      reused: r.reused,
      user: r.user,
      host: r.host,
    }));
    print(JSON.stringify({ store: store.shown, runs: rows }, null, 2));
    return;
  }
  const header = ['run', 'started', 'by', 'service', 'input', 'rows', 'status', 'credits', 'bought', 'reused'];
  const table = list.map((r) => [String(r.id), stamp(r.startedAt), who(r), r.service, r.input ?? '-', r.rows === null ? '-' : num(r.rows), r.dryRun ? 'dry run' : r.status, num(r.credits), num(r.bought), num(r.reused)]);
  print(formatTable(header, table, new Set([0, 5, 7, 8, 9])));
}

/** Who ran a run: user@host, or the host alone for a run recorded before stores kept the user. */
const who = (r: { user: string | null; host: string }): string => (r.user === null ? r.host : `${r.user}@${r.host}`);

/** An export's columns have a run's result column names, so a record reads alike wherever it came from; JSONL is one flat object per record. */
const EXPORT_COLUMNS = ['service', 'bought_at', 'credits', 'generation', 'company_domain', 'company_name', 'company_website_url', 'company_description', 'company_industry', 'company_employee_count', 'company_revenue_range', 'company_ownership_type', 'company_year_founded', 'company_specialties', 'company_hq_country', 'company_hq_city', 'company_last_updated'] as const;

function exportValues(h: HeldRecord): unknown[] {
  const r = h.record;
  const v = <T>(x: T | undefined): T | null => x ?? null;
  return [h.service, new Date(h.boughtAt).toISOString(), h.credits, h.generation, r.domain, v(r.name), v(r.website_url), v(r.description), v(r.industry), v(r.employee_count), v(r.revenue_range), v(r.ownership_type), v(r.year_founded), r.specialties ?? [], v(r.hq_country), v(r.hq_city), v(r.last_updated)];
}

/** The service's text starts at company_domain: made safe as a run's output makes it (io/service-text.ts). */
const SERVICE_TEXT_FROM = 4;

function csvRow(h: HeldRecord): unknown[] {
  return exportValues(h).map((x, i) => {
    const cell = Array.isArray(x) ? x.join('; ') : x;
    return i >= SERVICE_TEXT_FROM && typeof cell === 'string' ? neutraliseCell(cell) : cell;
  });
}

function jsonLine(h: HeldRecord): string {
  const clean = (x: unknown): unknown => (typeof x === 'string' ? stripControls(x) : Array.isArray(x) ? x.map(clean) : x);
  const values = exportValues(h).map((x, i) => (i >= SERVICE_TEXT_FROM ? clean(x) : x));
  return `${JSON.stringify(Object.fromEntries(EXPORT_COLUMNS.map((k, i) => [k, values[i]])))}\n`;
}

async function exportRecords(store: LedgerStore, action: Extract<LedgerAction, { kind: 'export' }>, stdout: NodeJS.WritableStream): Promise<void> {
  if (action.output !== '-') {
    // The file, not its name: a hard link of the store is the store too.
    const target = fileIdentity(action.output);
    for (const file of store.files) {
      if (target === fileIdentity(file)) throw new UsageError(`-o ${action.output} is the store itself; give the export another path`);
    }
    const reason = plantedLink(action.output) ?? unwritableReason(action.output);
    if (reason !== null) throw new UsageError(`-o ${reason}`);
  }
  const sink = await openSink(action.output, stdout);
  let done = false;
  try {
    if (action.format === 'csv') await sink.write(stringify([[...EXPORT_COLUMNS]]));
    for await (const h of store.records(action.service)) {
      const text = action.format === 'csv' ? stringify([csvRow(h)]) : jsonLine(h);
      await sink.write(text);
    }
    await sink.finish();
    done = true;
  } finally {
    if (!done) await sink.abort();
  }
}

/** `--service` takes the name `enrich ledger` shows, or a base URL as given to --base-url. */
export function checkService(name: string | undefined): string | undefined {
  if (name === undefined || name === 'sandbox:embedded') return name;
  if (/^https?:\/\//.test(name)) return serviceIdentity(name);
  throw new UsageError(`--service ${name}: give a service as \`enrich ledger\` lists it (https://host/api/v1/public, or sandbox:embedded)`);
}
