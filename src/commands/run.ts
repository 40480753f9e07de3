import { readdir, rm, stat } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { ServiceClient } from '../api/client.js';
import { serviceIdentity } from '../api/endpoint.js';
import type { RetryPolicy } from '../api/retry.js';
import { EnrichError, errorMessage, InterruptedError } from '../errors.js';
import { detectFormat, type CsvFormat } from '../io/csv-format.js';
import type { CsvBatch } from '../io/csv-reader.js';
import { tuneHeap } from '../heap.js';
import { resolveInput, type InputSource } from '../io/input.js';
import { stdinLimit } from '../io/spool-guard.js';
import { inputSha256, watchInput, type InputWatch } from '../io/input-identity.js';
import { loadScan, saveScan, type ScanKey } from '../io/scan-cache.js';
import { copyCsvWithResults, csvResultSuffix, jsonlResultFormatter, ROW_WINDOW, writeJsonlResults, type OutputFormat } from '../io/output.js';
import { INTERRUPTED_WRITING, openSink } from '../io/sink.js';
import { systemClock, type Clock } from '../pipeline/clock.js';
import type { Stop } from '../pipeline/execute.js';
import { SCAN_RULES } from '../pipeline/scan-rules.js';
import { freshSince, planCompany, planDomain, type Policy } from '../pipeline/plan.js';
import { Progress, type ProgressSink } from '../pipeline/progress.js';
import { resultForRow, resultKey, rowCompany, showsRecord, type RowResult } from '../pipeline/results.js';
import type { CompanyRecord } from '../api/types.js';
import type { ScanResult } from '../pipeline/scan.js';
import { RunState, type Company } from '../pipeline/state.js';
import { emptyTally, summarise, type RowTally, type Summary } from '../pipeline/summary.js';
import type { SandboxOptions } from '../sandbox/index.js';
import { importJournal, notJournal, type Imported } from '../store/import-journal.js';
import { defaultStorePath, displayStore, scanCacheDir } from '../store/path.js';
import { explainStoreFailure, openBatchStore, teamStoreOutOfReach } from '../store/open.js';
import { monthBill, monthStart, type MonthBill } from '../pipeline/pricing.js';
import type { ConnectionNotice, MonthSpend, RunEnd, ServiceStore } from '../store/types.js';
import type { Reporter } from '../ui/reporter.js';
import { count, num } from '../ui/format.js';
import { capName, monthOf, type BudgetLine } from '../store/budget.js';
import { isTeamStore } from '../store/path.js';
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
  /** The purchase store's path (--store, ENRICH_STORE, or the user's state directory). */
  store: string;
  /** Re-buy records bought longer ago than this; null: never. */
  maxAgeMs: number | null;
  /** Ask the free match again about a miss older than this. */
  missMaxAgeMs: number;
  /** How long a paid call whose answer was lost may go on at the service; null: the default. */
  settleMs?: number | null;
  /** The longest one request may take, its whole answer included; null: the client's default (60 s). */
  requestDeadlineMs?: number | null;
  /** A journal of enrich 0.1 to import (besides the one found beside the input). */
  journal: string | undefined;
  concurrency: number;
  service: ServiceTarget;
  retry?: RetryPolicy;
  /** Write the service's text as received (no formula neutralising, no control stripping). */
  rawServiceText?: boolean;
  /** After Ctrl-C, how long requests already sent may take to answer. */
  graceMs?: number;
  /** Ask before a large spend when a person can answer (no --yes); the context says if one can. */
  confirm?: boolean;
}

export interface RunContext {
  stdin: NodeJS.ReadableStream;
  stdout: NodeJS.WritableStream;
  env: NodeJS.ProcessEnv;
  reporter: Reporter;
  interrupt: AbortSignal;
  clock?: Clock;
  random?: () => number;
  /** Wall-clock ms since the epoch, for the freshness policy and the store's timestamps. */
  now?: () => number;
  /** Asks a person a yes/no question; absent where nobody can answer (no terminal, a pipe, cron). */
  ask?: (question: string) => Promise<boolean>;
}

export interface RunResult {
  summary: Summary;
  stop: Stop | null;
}

export const EMBEDDED_SERVICE = 'sandbox:embedded';

/** Where enrich 0.1 kept the journal of this input, if it ran on it. */
function legacyJournals(options: RunOptions, sha256: string, env: NodeJS.ProcessEnv): string[] {
  const paths: string[] = [];
  if (options.journal !== undefined) paths.push(options.journal);
  if (options.input !== '-') paths.push(`${options.input}.enrich-journal`);
  if (options.output !== '-') paths.push(`${options.output}.enrich-journal`);
  // 0.1 kept piped inputs' journals where the default store now lives.
  paths.push(join(dirname(defaultStorePath(env)), `stdin-${sha256.slice(0, 16)}.enrich-journal`));
  return paths;
}

async function* checked(batches: AsyncIterable<CsvBatch>, interrupt: AbortSignal, progress: ProgressSink): AsyncGenerator<CsvBatch> {
  let rows = 0;
  for await (const batch of batches) {
    if (interrupt.aborted) throw new InterruptedError('interrupted while reading the input; nothing was sent');
    progress({ type: 'rows', rows: (rows += batch.records.length) });
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
    outcome = { ok: true, result: await batch(options, ctx, progress.sink, cleanups) };
  } catch (error) {
    outcome = { ok: false, error };
  }
  ctx.reporter.end();
  // Every cleanup runs (the stdin spool must go even if the store failed to close); a cleanup's
  // failure is reported only when the run itself did not fail with its own error.
  let cleanupError: unknown;
  for (const cleanup of cleanups.reverse()) {
    try {
      await cleanup();
    } catch (error) {
      cleanupError ??= error;
    }
  }
  // Interrupted while the team store could not be written or read: the interrupt is what stopped
  // the run. Calls already sent keep their intents, and the next run resumes them under their keys.
  if (!outcome.ok && ctx.interrupt.aborted && isTeamStore(options.store) && !(outcome.error instanceof InterruptedError) && (await teamStoreOutOfReach(outcome.error))) {
    throw new InterruptedError(`interrupted while the team store could not be reached (${errorMessage(outcome.error)}); run the same command to finish: calls already sent resume under their keys, nothing is bought twice`);
  }
  // SQLite's word that the store is damaged, said as such, wherever in the run it was found.
  if (!outcome.ok) throw explainStoreFailure(outcome.error, displayStore(options.store));
  if (cleanupError !== undefined) throw explainStoreFailure(cleanupError, displayStore(options.store));
  return outcome.result;
}

/** Scan caches beyond the newest few are dropped: each is a pure speed-up for one input. */
async function pruneScans(dir: string, keep: number, suffix = '.scan'): Promise<void> {
  const names = (await readdir(dir).catch(() => [] as string[])).filter((n) => n.endsWith(suffix));
  if (names.length <= keep) return;
  const dated = await Promise.all(names.map(async (n) => ({ n, t: (await stat(join(dir, n)).catch(() => null))?.mtimeMs ?? 0 })));
  dated.sort((a, b) => b.t - a.t);
  await Promise.all(dated.slice(keep).map(({ n }) => rm(join(dir, n), { force: true })));
}

/** Reads the input once: validate, normalise, dedupe (from the scan cache when it is the same input). */
async function scanInput(options: RunOptions, ctx: RunContext, progress: ProgressSink, input: InputSource, format: CsvFormat, sha256: string, state: RunState, watch: InputWatch): Promise<ScanResult> {
  const scanKey: ScanKey = { tool: VERSION, rules: SCAN_RULES, sha256, bytes: input.bytes, column: options.column ?? null, format };
  const dir = scanCacheDir(options.store, ctx.env);
  const cachePath = join(dir, `${sha256.slice(0, 32)}.scan`);
  const cached = await loadScan(cachePath, scanKey, state);
  if (cached !== null) {
    progress({ type: 'rows', rows: cached.rows });
    return cached;
  }
  // The parser and the domain rules load only when the input must be read again.
  const [{ readCsv }, { scanRecords }, { Utf8Check }] = await Promise.all([import('../io/csv-reader.js'), import('../pipeline/scan.js'), import('../io/utf8-check.js')]);
  const utf8 = format.utf8 ? new Utf8Check() : undefined;
  const scan = await scanRecords(checked(readCsv(input.path, input.displayName, format, utf8), ctx.interrupt, progress), state, options.column, input.bytes);
  scan.notUtf8At = utf8?.firstInvalid ?? null;
  // Cached under the sha256 hashed before this read: only if both read the same file.
  watch.check();
  // Only a cache: a run that cannot write it is slower next time, nothing worse.
  await saveScan(cachePath, scanKey, scan, state.domains).catch(() => {});
  await pruneScans(dir, 16);
  await pruneScans(dir, 64, '.input');
  return scan;
}

/** Loads what the store knows of the input's domains and their companies, judged by the policy. */
async function loadFromStore(state: RunState, records: ServiceStore, policy: Policy): Promise<void> {
  await records.loadLookups(state.domains, (d) => state.indexOf(d), (i, lookup) => state.loadDomain(i, planDomain(lookup, policy)));
  await records.loadCompanies(
    state.companies.map((c) => c.domain),
    (domain, { held, purchase }) => {
      const company = state.company(domain);
      if (company === undefined) return;
      state.loadCompany(company, planCompany(held, purchase, policy));
    },
  );
}

/** The records the results show, read a window of rows at a time in one batched read (never per row, never all at once), skipping companies whose rows are all formatted (`needless`). */
function recordWindow(
  scan: ScanResult,
  state: RunState,
  records: ServiceStore,
): { prepare(from: number, to: number, needless: (c: Company) => boolean): Promise<void>; read(domain: string): CompanyRecord | null } {
  const held = new Map<string, CompanyRecord>();
  return {
    async prepare(from, to, needless) {
      // About a window of rows' worth of records at once.
      if (held.size >= ROW_WINDOW) held.clear();
      const wanted = new Set<string>();
      for (let row = from; row < to; row++) {
        const company = rowCompany(scan.rowRefs.get(row), state);
        if (company !== undefined && showsRecord(company) && !held.has(company.domain) && !needless(company)) wanted.add(company.domain);
      }
      for (const [domain, record] of await records.records([...wanted])) held.set(domain, record);
    },
    read: (domain) => held.get(domain) ?? null,
  };
}

/** The batch's four stages: read the input, plan from the store, ask the service, write results. Nothing is sent before the input is read whole, nothing written before the service is done. */
async function batch(options: RunOptions, ctx: RunContext, progress: ProgressSink, cleanups: Cleanups): Promise<RunResult> {
  const clock = ctx.clock ?? systemClock;
  const started = clock.now();
  const read = await readStage(options, ctx, progress, cleanups);
  const plan = await planStage(options, ctx, read, cleanups);
  const { stop, declined } = await askStage(options, ctx, progress, cleanups, read, plan, { clock, random: ctx.random ?? Math.random, now: plan.now });
  return writeStage(options, ctx, progress, read, plan, { stop, declined, elapsedMs: () => clock.now() - started });
}

/** What reading the input made: the spooled or named file, its identity, the scan, the run's state. */
interface Read {
  input: InputSource;
  watch: InputWatch;
  sha256: string;
  scan: ScanResult;
  format: CsvFormat;
  state: RunState;
}

/** 1. Read the whole input once: validate, normalise, dedupe. Nothing is sent before this ends. */
async function readStage(options: RunOptions, ctx: RunContext, progress: ProgressSink, cleanups: Cleanups): Promise<Read> {
  if (options.input === '-' && (ctx.stdin as { isTTY?: boolean }).isTTY === true) {
    ctx.reporter.note('reading CSV from the terminal: paste or type it, then press Ctrl-D');
  }
  const input = await resolveInput(options.input, () => ctx.stdin, ctx.interrupt, () => stdinLimit(ctx.env));
  cleanups.push(() => input.cleanup());
  const watch = watchInput(input);
  tuneHeap(input.bytes);
  const detected = await detectFormat(input.path, input.displayName);
  const sha256 = await inputSha256(input);
  const state = new RunState();
  const scan = await scanInput(options, ctx, progress, input, detected, sha256, state, watch);
  // The format is read from the first 64 KiB: a byte further on may show the file is not UTF-8
  // after all, and then results are written as for one that is not (one encoding per file).
  const format: CsvFormat = scan.notUtf8At === null ? detected : { ...detected, utf8: false };
  if (!format.utf8) {
    const from = scan.notUtf8At === null ? '' : ` (from line ${await (await import('../io/csv-reader.js')).lineAt(input.path, scan.notUtf8At, false)})`;
    ctx.reporter.warn(
      `${input.displayName} is not UTF-8${from} (Latin-1 or Windows-1252?): CSV results copy its rows unchanged, but a domain with accents may not match, and JSONL shows such characters as \ufffd; save it as UTF-8 to be sure`,
    );
  }
  return { input, watch, sha256, scan, format, state };
}

/** What the plan made: this run's records in the store, the policy, and the month so far. */
interface Planned {
  records: ServiceStore;
  policy: Policy;
  heldAny: boolean;
  since: number;
  /** What this service's runs spent this month before this run. */
  earlier: MonthSpend;
  /** The monthly caps that apply to this run as it starts (store/budget.ts); empty: none. */
  budget: BudgetLine[];
  /** The run's end, once it is written (else a cleanup writes it as failed). */
  end(end: RunEnd): Promise<void>;
  /** The store's clock, which the run stamps and compares every time by. */
  now: () => number;
}

/** 2. The store: what was bought and learned before, by any run, from any input, judged by the policy. */
async function planStage(options: RunOptions, ctx: RunContext, read: Read, cleanups: Cleanups): Promise<Planned> {
  const { input, sha256, scan, state } = read;
  // Said off a terminal too: a cron log then shows why a run stalled, and that it went on.
  const notice = (n: ConnectionNotice): void =>
    ctx.reporter.warn(
      n.lost
        ? `lost the team store (${n.why}); trying again for up to ${Math.round(n.budgetMs / 1000)} s, and no new purchase starts meanwhile`
        : `the team store answers again after ${(n.afterMs / 1000).toFixed(1)} s; the run goes on`,
    );
  const store = await openBatchStore(options.store, { tool: `enrich/${VERSION}`, ...(ctx.now === undefined ? {} : { now: ctx.now }), env: ctx.env, notice, interrupt: ctx.interrupt });
  const now = store.now;
  cleanups.push(() => store.close());
  for (const path of legacyJournals(options, sha256, ctx.env)) reportImport(ctx.reporter, path, await importJournal(store, path));
  const service = options.service.kind === 'sandbox' ? EMBEDDED_SERVICE : serviceIdentity(options.service.baseUrl);
  const records: ServiceStore = await store.beginRun(
    service,
    {
      inputName: input.fromStdin ? 'stdin' : input.displayName,
      inputSha256: sha256,
      rows: scan.rows,
      dryRun: options.dryRun,
      options: { column: options.column ?? null, max_age_ms: options.maxAgeMs, max_credits: options.maxCredits, format: options.format },
    },
  );
  let ended = false;
  cleanups.push(async () => {
    // Whatever was queued is committed (or failed) before the claims are let go.
    await records.close().catch(() => {});
    await records.releaseClaims();
    if (!ended) await records.endRun({ status: 'failed', credits: state.creditsThisSession, bought: state.companies.filter((c) => c.source === 'bought').length, reused: 0 });
  });
  const policy: Policy = { now: records.policyNow, maxAgeMs: options.maxAgeMs, missMaxAgeMs: options.missMaxAgeMs };
  await loadFromStore(state, records, policy);
  const since = monthStart(now());
  const end = async (e: RunEnd): Promise<void> => {
    await records.endRun(e);
    ended = true;
  };
  return { records, policy, heldAny: await records.holdsAny(), since, earlier: await records.creditsSince(since), budget: await records.budget(), end, now };
}

/** 3. Ask the service for what is still owed: free matches, then (unless a dry run) purchases. */
async function askStage(
  options: RunOptions,
  ctx: RunContext,
  progress: ProgressSink,
  cleanups: Cleanups,
  { state }: Read,
  plan: Planned,
  time: { clock: Clock; random: () => number; now: () => number },
): Promise<{ stop: Stop | null; declined: boolean }> {
  let stop: Stop | null = null;
  let matchesOwed = 0;
  for (let d = 0; d < state.domainCount; d++) if (state.needsMatch(d)) matchesOwed++;
  progress({ type: 'matches-owed', count: matchesOwed });
  const owesEnrich = !options.dryRun && state.companies.some((c) => state.needsEnrich(c));
  let declined = false;
  if (matchesOwed > 0 || owesEnrich) {
    progress({ type: 'phase', phase: 'match' });
    ctx.reporter.refresh();
    const pass = await executor(options, ctx, progress, cleanups, state, plan, time);
    // A person at a terminal is asked before a large spend, so every match comes first (the exact count is known only then);
    // only when the run could buy that many, so a smaller run keeps matching and buying overlapped.
    const mostToBuy = state.owed().buy + matchesOwed;
    // Not against the embedded sandbox: its credits are play money, and its demo should just run.
    const asking = !options.dryRun && options.maxCredits === null && options.confirm === true && ctx.ask !== undefined && options.service.kind !== 'sandbox' && mostToBuy > CONFIRM_ABOVE;
    if (asking) {
      stop = await pass(true);
      const buy = state.owed().buy;
      // What the run can buy before the tightest monthly cap stops it: the figure the bill is of,
      // and what is asked about (a cap that leaves 100 credits or fewer is not asked over).
      const budget = stop === null && buy > CONFIRM_ABOVE ? await plan.records.budget() : [];
      const left = tightest(budget);
      const buyNow = left === null ? buy : Math.min(buy, state.owed().reserved + left);
      if (stop === null && buyNow > CONFIRM_ABOVE) {
        declined = !(await ctx.ask!(confirmQuestion(buy, buyNow, monthBill(plan.earlier.charged, buyNow, plan.since), budget, isTeamStore(options.store))));
        if (ctx.interrupt.aborted) stop = { reason: 'interrupted' };
        else if (declined) stop = { reason: 'budget', limit: 0, declined: true };
      }
    }
    if (stop === null) stop = await pass(options.dryRun);
  }
  await plan.records.flush();
  return { stop, declined };
}

/** 4. Results, in input order, rebuilt from the state and the store; then the totals. */
async function writeStage(
  options: RunOptions,
  ctx: RunContext,
  progress: ProgressSink,
  read: Read,
  plan: Planned,
  { stop, declined, elapsedMs }: { stop: Stop | null; declined: boolean; elapsedMs: () => number },
): Promise<RunResult> {
  const { scan, state } = read;
  progress({ type: 'phase', phase: 'write' });
  ctx.reporter.refresh();
  // Nothing worth writing when the key was refused or the service never answered at all.
  // A run stopped for the service writes what it has (from this run or the store), as any other.
  const silent = declined || stop?.reason === 'interrupted' || stop?.reason === 'auth' || (stop?.reason === 'unavailable' && !stop.worked && !state.knowsAny());
  const writeOutput = options.writesOutput && !silent;
  // Answered no: every match is in, nothing bought, as in a dry run: its rows are "found", not "skipped".
  const tally = writeOutput ? await writeResults({ options, ...read, records: plan.records, stop, ctx }) : countResults(scan, state, options.dryRun || declined, stop);
  progress({ type: 'phase', phase: 'done' });
  ctx.reporter.refresh();
  const reused = state.companies.filter((c) => c.status === 'hit' && c.source !== 'bought').map((c) => c.domain);
  const summary = summarise({
    state,
    tally,
    rows: scan.rows,
    dryRun: options.dryRun,
    stop,
    store: displayStore(options.store),
    output: writeOutput ? options.output : null,
    elapsedMs: elapsedMs(),
    saved: await plan.records.savedAmong(reused),
    maxCredits: options.maxCredits,
    budget: { month: monthOf(plan.now()).name, team: isTeamStore(options.store), lines: await plan.records.budget(), leftBefore: tightest(plan.budget) },
    month: { since: plan.since, earlier: plan.earlier },
  });
  await plan.end({ status: summary.status, credits: summary.credits_charged, bought: summary.bought, reused: summary.reused });
  return { summary, stop };
}

/** Above this many credits, a person at a terminal is asked first (docs/money.md). */
export const CONFIRM_ABOVE = 100;

function confirmQuestion(buy: number, buyNow: number, bill: MonthBill, budget: readonly BudgetLine[], team: boolean): string {
  const month = bill.earlierCredits > 0 ? `, on top of ${count(bill.earlierCredits, 'credit')} this service's runs spent this month` : '';
  const caps = budget.map((l) => `${capName(l.person, team).replace(/^the/, 'The')} has ${count(l.left ?? 0, 'credit')} left of ${num(l.cap ?? 0)}`);
  const what = buyNow < buy ? `${num(buyNow)} of ${count(buy, 'company', 'companies')}` : count(buy, 'company', 'companies');
  // Resumed purchases hold their reservation already: counted in what the caps have spent or held.
  const resumed = buyNow - Math.min(buyNow, tightest(budget) ?? buyNow);
  const rest = buyNow < buy ? `, so ${count(buy - buyNow, 'company waits', 'companies wait')} for more room` : '';
  const already = resumed > 0 ? ` (${count(resumed, 'resumed purchase', 'resumed purchases')} counted there already)` : '';
  const stops = caps.length === 0 ? '' : ` ${caps.join('; ')}${already}${rest}.`;
  return `buy ${what} for ${count(buyNow, 'credit')}${month}? This month's bill becomes ${usd(bill.after.total)} on ${bill.after.plan.name} (adds ${usd(bill.addsUsd)}).${stops} [y/N] `;
}

/** What the tightest of a run's caps has left; null: none applies. */
const tightest = (lines: readonly BudgetLine[]): number | null => (lines.length === 0 ? null : Math.min(...lines.map((l) => l.left ?? 0)));

const usd = (n: number): string => `$${Number.isInteger(n) ? String(n) : n.toFixed(2)}`;

/** Loads the network side once and returns a pass over what is owed: matches only (dry) or everything. */
async function executor(
  options: RunOptions,
  ctx: RunContext,
  progress: ProgressSink,
  cleanups: Cleanups,
  state: RunState,
  { records, policy, heldAny }: Planned,
  { clock, random, now }: { clock: Clock; random: () => number; now: () => number },
): Promise<(dryRun: boolean) => Promise<Stop | null>> {
  const [client, { execute }, { Flow }, { DEFAULT_RETRY_POLICY }, { idempotencyKey }] = await Promise.all([
    connect(options, cleanups),
    import('../pipeline/execute.js'),
    import('../pipeline/flow.js'),
    import('../api/retry.js'),
    import('../pipeline/idempotency-key.js'),
  ]);
  const flow = new Flow(clock, options.concurrency);
  return (dryRun) =>
    execute(
      state,
      {
        dryRun,
        maxCredits: options.maxCredits,
        retry: options.retry ?? DEFAULT_RETRY_POLICY,
        // One window's worth queued beyond the most in flight, so a freed slot never waits for a match; more only held memory.
        matchesQueued: options.concurrency + 32,
        graceMs: options.graceMs ?? 10_000,
        freshSince: freshSince(policy),
        ...(options.settleMs == null ? {} : { settleMs: options.settleMs }),
      },
      {
        client,
        flow,
        store: records,
        clock,
        random,
        idempotencyKey: (company: Company, version: number) => idempotencyKey(records.storeId, company.domain, company.generation, version),
        planCompany: async (company) => {
          // A live run's claim looks again before buying; a dry run has only this look to go by.
          if (!options.dryRun && !heldAny) return;
          const { held, purchase } = await records.companyState(company.domain);
          if (held !== null || purchase !== null) state.loadCompany(company, planCompany(held, purchase, policy));
        },
        progress,
        now,
      },
      ctx.interrupt,
    );
}

function reportImport(reporter: Reporter, path: string, imported: Imported | 'not_journal' | null): void {
  if (imported === 'not_journal') {
    reporter.warn(`${notJournal(path)} from it`);
    return;
  }
  if (imported === null || (imported.companies === 0 && imported.open === 0 && imported.damaged === null)) return;
  const open = imported.open > 0 ? `; ${count(imported.open, 'unfinished purchase resumes under its own key', 'unfinished purchases resume under their own keys')}` : '';
  reporter.note(`imported ${count(imported.companies, 'company', 'companies')} bought with enrich 0.1 from ${imported.path}${open}`);
  if (imported.damaged !== null) reporter.warn(`${imported.path} is damaged (${imported.damaged}): what came before the damage was imported`);
}

/** The network stack and the sandbox load only when there is work for them (not on a resume that is already done). */
async function connect(options: RunOptions, cleanups: Cleanups): Promise<ServiceClient> {
  const { createClient, createDispatcher, DEFAULT_TIMEOUT_MS } = await import('../api/client.js');
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
  const deadline = options.requestDeadlineMs == null ? {} : { deadlineMs: options.requestDeadlineMs, timeoutMs: Math.min(DEFAULT_TIMEOUT_MS, options.requestDeadlineMs) };
  return createClient({ baseUrl, apiKey, dispatcher, userAgent: `enrich/${VERSION} node/${process.versions.node}`, ...deadline });
}

/** The formatted results of rows, each distinct one made once (formattedResults). */
interface Formatted<T> {
  of(row: number): T;
  /** Whether every row of company `c` to come is formatted already (its first and its repeats): its record is not needed. */
  done(c: Company): boolean;
  /** Between windows of rows: lets the formatted results go when there are many. */
  trim(): void;
}

/** Row i -> its formatted result; each distinct result (see resultKey) is built and formatted once, however many rows share it, and every row is tallied. */
function formattedResults<T>(
  scan: ScanResult,
  state: RunState,
  build: (ref: number) => RowResult,
  format: (result: RowResult) => T,
  tally: RowTally,
): Formatted<T> {
  const cache = new Map<string, { status: RowResult['status']; value: T }>();
  // After a company's first row its later rows say `repeat`, so counting `bought` rows counts credits, not rows.
  const seen = new Set<string>();
  return {
    of(row) {
      const ref = scan.rowRefs.get(row);
      let key = resultKey(ref, state);
      const repeat = key.startsWith('c') && seen.has(key);
      if (key.startsWith('c')) seen.add(key);
      if (repeat) key += '+';
      let hit = cache.get(key);
      if (hit === undefined) {
        let result = build(ref);
        if (repeat && result.source !== null) result = { ...result, source: 'repeat' };
        hit = { status: result.status, value: format(result) };
        cache.set(key, hit);
      }
      tally[hit.status]++;
      return hit.value;
    },
    // Once its first row is out, a company's rows are all repeats: its first row's result may be let go.
    done: (c) => seen.has(`c${c.index}`) && cache.has(`c${c.index}+`),
    // Only between windows: a window's rows are formatted from what was there when its records were read.
    trim() {
      if (cache.size >= 100_000) cache.clear();
    },
  };
}

function countResults(scan: ScanResult, state: RunState, dryRun: boolean, stop: Stop | null): RowTally {
  const tally = emptyTally();
  const status = formattedResults(scan, state, (ref) => resultForRow(ref, state, null, { dryRun, stop }), (r) => r.status, tally);
  for (let i = 0; i < scan.rows; i++) {
    if (i % ROW_WINDOW === 0) status.trim();
    status.of(i);
  }
  return tally;
}

type Written = Read & { options: RunOptions; records: ServiceStore; stop: Stop | null; ctx: RunContext };

async function writeResults({ options, scan, state, input, format, records, stop, ctx, watch, sha256 }: Written): Promise<RowTally> {
  const tally = emptyTally();
  await watch.verify(sha256);
  const sink = await openSink(options.output, ctx.stdout, true, ctx.interrupt);
  const window = recordWindow(scan, state, records);
  const build = (ref: number): RowResult => resultForRow(ref, state, window.read, { dryRun: options.dryRun, stop });
  const raw = { raw: options.rawServiceText === true };
  // Before each window of rows: the records its rows need that are not formatted already.
  const preparing = (results: Formatted<unknown>) => async (from: number, to: number): Promise<void> => {
    results.trim();
    await window.prepare(from, to, results.done);
  };
  const checkpoint = (): void => {
    if (ctx.interrupt.aborted) throw new InterruptedError(INTERRUPTED_WRITING);
  };
  let done = false;
  try {
    if (options.format === 'csv') {
      const results = formattedResults(scan, state, build, (r) => csvResultSuffix(r, format, raw), tally);
      await copyCsvWithResults({
        inputPath: input.path,
        sink,
        format,
        header: scan.header,
        headerRange: scan.headerRange,
        rows: scan.rows,
        rowEnds: scan.rowEnds,
        rowStarts: scan.rowStarts,
        suffix: results.of,
        prepare: preparing(results),
        checkpoint,
      });
    } else {
      const results = formattedResults(scan, state, build, jsonlResultFormatter(scan.header, raw), tally);
      await writeJsonlResults({
        inputPath: input.path,
        displayName: input.displayName,
        sink,
        format,
        header: scan.header,
        headerless: scan.headerless,
        result: results.of,
        prepare: preparing(results),
        checkpoint,
      });
    }
    // Before the result is renamed into place: the file may have changed while it was copied.
    watch.check();
    await sink.finish();
    done = true;
  } catch (error) {
    // Rows that no longer lie where the scan found them (copyCsvWithResults): say why.
    if (!(error instanceof EnrichError)) watch.check();
    throw error;
  } finally {
    if (!done) await sink.abort();
  }
  return tally;
}
