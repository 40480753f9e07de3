import type { ServiceClient } from '../api/client.js';
import { DEFAULT_MAX_RETRY_AFTER_SECONDS, type RetryPolicy } from '../api/retry.js';
import type { Claim, IntentEvent, RunsUnderWay, StoreEvent } from '../store/types.js';
import { attempter } from './attempt.js';
import type { Clock } from './clock.js';
import { CreditBudget, enrichStep, ResumeGate } from './enrich-step.js';
import { Health } from './health.js';
import { matchStep } from './match-step.js';
import type { ProgressSink } from './progress.js';
import { StoppedError, type Flow } from './flow.js';
import type { Company, RunState } from './state.js';
import { sharedController, Stops, type Stop } from './stops.js';
import { Tasks } from './tasks.js';

export type { Stop } from './stops.js';

export { DEFAULT_SETTLE_MS } from './run-purchase.js';
import { DEFAULT_SETTLE_MS } from './run-purchase.js';

/** Where outcomes go: the store (or, in tests, anything that keeps them). */
export interface EventSink {
  /** Queues an event; an intent is made durable and resolves with whether this run may buy. */
  append(event: StoreEvent, durable?: boolean): Promise<Claim>;
  /** This run's hold on its claims may have lapsed (it was paused): claim again before sending. */
  leaseLapsed?(): boolean;
  /** Lapses of that hold so far: a claim made in an earlier one must be made again. */
  leaseEpoch?(): number;
  /** Renews this run's hold on its claims now (after a lapse, before claiming again). */
  renewLease?(): Promise<void>;
  /** This service's other runs under way, by id (the team's machines on the key, where the store can tell): ServiceStore.otherRuns. */
  otherRuns?(known: readonly number[], after: number | null): Promise<RunsUnderWay>;
  /** Waits until another run's outcome for `company` may have come (woken early where the store can tell) or `ms` passed; never rejects. */
  waitForOutcome?(company: string, ms: number, signal: AbortSignal): Promise<unknown>;
}

export interface ExecuteOptions {
  dryRun: boolean;
  /** Credits this invocation may spend; null for no cap. */
  maxCredits: number | null;
  retry: RetryPolicy;
  /** The most matches queued or in flight; below it, the flow's window plus 32: enough to keep it busy, few enough to stay small. */
  matchesQueued: number;
  /** After an interrupt, how long requests already sent may take before they are abandoned. */
  graceMs: number;
  /** How long to wait before asking again about a purchase another live run holds open. */
  busyPollMs?: number;
  /** How long a paid call whose answer was lost may go on at the service (default 60 s). */
  settleMs?: number;
  /** The freshness rule (pipeline/plan.ts freshSince): a claim refuses a company held fresh by it (default: any held). */
  freshSince?: number | null;
}

export interface ExecuteDeps {
  client: ServiceClient;
  flow: Flow;
  store: EventSink;
  clock: Clock;
  random: () => number;
  /** The key for a company's purchase generation and key version (pipeline/idempotency-key.ts). */
  idempotencyKey(company: Company, version: number): string;
  /** A company first met in this run's matches: load what the store holds of it, and plan. */
  planCompany(company: Company): Promise<void> | void;
  progress: ProgressSink;
  /** Wall-clock ms since the epoch (default Date.now): when records were bought. */
  now?: () => number;
}

/** How often the store is asked which other runs are under way: one that ended may have left its share of the key's rate free. */
export const PEER_POLL_MS = 1_000;

/** The end game's length, in seconds at the learned pace (execute). */
export const END_GAME_SECONDS = 3;

/** Matches every domain owed a match and enriches every matched company owed a record, in one pipelined pass; nothing here throws for a row. */
export async function execute(state: RunState, options: ExecuteOptions, deps: ExecuteDeps, interrupt: AbortSignal): Promise<Stop | null> {
  const stops = new Stops();
  const grace = onInterrupt(interrupt, stops, options.graceMs);
  // A task only throws when the store cannot be written: stop everything, report it.
  const tasks = new Tasks(() => stops.stopAll({ reason: 'interrupted' }));
  const peers = watchPeers(deps);
  const progress: ProgressSink = (event) => {
    deps.progress(event);
    peers.tick();
  };
  const { resuming, enqueueEnrich, match } = wire(state, options, { ...deps, progress }, { stops, inflight: grace.inflight, tasks });

  // Companies the store already matched but never bought (or holds stale) go first, resumed keys first of all.
  for (const company of resuming) enqueueEnrich(company);
  for (const company of state.companies) enqueueEnrich(company);
  // As many matches as the flow has room for now, and 32 more queued: what waits in its queue
  // waits in memory, long enough to outlive a young collection or two (up to matchesQueued).
  const matchRoom = (): number => Math.min(options.matchesQueued, deps.flow.window + 32);
  // The end game: once fewer matches are left than END_GAME_SECONDS at the pace, waiting matches go before waiting enriches
  // (none waiting longer than that), so a late match's enrich is not left trailing the run. Each pass starts in the usual order.
  let endGame = false;
  deps.flow.matchesFirst(null);
  // Requests left, for the flow's last stretch: matches not yet queued, and each task under way (a match may bring an enrich).
  let matchesLeft = 0;
  for (let d = 0; d < state.domainCount; d++) if (state.needsMatch(d)) matchesLeft++;
  deps.flow.remainingFrom(() => 2 * matchesLeft + tasks.remaining);
  try {
    for (let d = 0; d < state.domainCount; d++) {
      if (stops.all.signal.aborted) break;
      if (!state.needsMatch(d)) continue;
      if (!endGame && deps.flow.paced && matchesLeft <= deps.flow.rate * END_GAME_SECONDS) {
        endGame = true;
        deps.flow.matchesFirst(END_GAME_SECONDS * 1000);
      }
      matchesLeft--;
      const wait = tasks.room(matchRoom, stops.all.signal);
      if (wait !== undefined) await wait;
      if (stops.all.signal.aborted) break;
      tasks.track(match(d), true);
    }
    await tasks.drain();
  } finally {
    peers.stop();
  }
  grace.dispose();
  if (tasks.failure !== null) throw tasks.failure;
  return stops.first;
}

/**
 * Tells the flow when another run on the service ends (its requests stop counting against the key). Asked on the run's progress, at most
 * once every PEER_POLL_MS and only while the flow is paced (the news is for a pace); a failed ask is no news. Each ask reads again the runs
 * after the one before last: a run numbered earlier may become visible later (PostgreSQL hands out ids before commit).
 */
function watchPeers(deps: ExecuteDeps): { tick(): void; stop(): void } {
  const ask = deps.store.otherRuns?.bind(deps.store);
  let seen: readonly number[] = [];
  let after: number | null = null;
  let last: number | null = null;
  let next = Number.NEGATIVE_INFINITY;
  let stopped = false;
  const heard = (asked: RunsUnderWay): void => {
    if (stopped) return;
    if (seen.some((id) => !asked.under.includes(id))) deps.flow.peerLeft();
    [seen, after, last] = [asked.under, last ?? asked.last, asked.last];
  };
  return {
    tick: () => {
      if (ask === undefined || stopped || deps.clock.now() < next || !deps.flow.paced) return;
      // One ask at a time; the next a second after it.
      next = Number.POSITIVE_INFINITY;
      void Promise.resolve()
        .then(() => ask(seen, after))
        .then(heard, () => {})
        .finally(() => (next = deps.clock.now() + PEER_POLL_MS))
        .catch(() => {});
    },
    stop: () => void (stopped = true),
  };
}

/** Ctrl-C stops starting calls at once; requests already sent may finish until the grace period ends (`inflight`). */
function onInterrupt(interrupt: AbortSignal, stops: Stops, graceMs: number): { inflight: AbortController; dispose(): void } {
  const inflight = sharedController();
  let graceTimer: NodeJS.Timeout | undefined;
  const stop = (): void => {
    stops.stopAll({ reason: 'interrupted' });
    graceTimer = setTimeout(() => inflight.abort(new StoppedError('interrupted')), graceMs);
    graceTimer.unref();
  };
  if (interrupt.aborted) stop();
  else interrupt.addEventListener('abort', stop, { once: true });
  return {
    inflight,
    dispose: () => {
      interrupt.removeEventListener('abort', stop);
      if (graceTimer !== undefined) clearTimeout(graceTimer);
    },
  };
}

interface Wired {
  /** Companies whose keys earlier runs may have been charged under: they go first. */
  resuming: Company[];
  enqueueEnrich(company: Company): void;
  match(d: number): Promise<void>;
}

/** The steps of one run, wired to each other: attempts through the breaker, matches that hand hits to enriches. */
function wire(state: RunState, options: ExecuteOptions, deps: ExecuteDeps, run: { stops: Stops; inflight: AbortController; tasks: Tasks }): Wired {
  const { progress } = deps;
  const { stops, tasks } = run;
  const record = (event: StoreEvent): void => {
    void deps.store.append(event);
    state.apply(event);
  };
  const health = new Health(deps.now ?? Date.now, {
    count: options.retry.maxRateLimitedAttempts,
    // Twice the longest Retry-After a run waits out: one honoured wait, and its retry refused, is not yet an outage.
    ms: 2 * (options.retry.maxRetryAfterSeconds ?? DEFAULT_MAX_RETRY_AFTER_SECONDS) * 1000,
    clock: () => deps.clock.now(),
  });
  const attempt = attempter({
    flow: deps.flow,
    clock: deps.clock,
    random: deps.random,
    retry: options.retry,
    progress,
    inflight: run.inflight.signal,
    pausedUntil: () => deps.flow.pausedUntil,
    health,
    unavailable: (outage) => stops.stopAll({ reason: 'unavailable', ...outage }),
  });
  // Keys earlier runs may have been charged under go first, and new purchases wait for their answers.
  const resuming = options.dryRun ? [] : state.companies.filter((c) => c.purchase.state === 'uncertain');
  const enrich = enrichStep({
    state,
    client: deps.client,
    attempt,
    stops,
    budget: new CreditBudget(options.maxCredits),
    maxCredits: options.maxCredits,
    clock: deps.clock,
    progress,
    now: deps.now ?? Date.now,
    record,
    claim: (intent: IntentEvent) => deps.store.append(intent, true),
    leaseLapsed: () => deps.store.leaseLapsed?.() ?? false,
    renewLease: async () => deps.store.renewLease?.(),
    leaseEpoch: () => deps.store.leaseEpoch?.() ?? 0,
    ...(deps.store.waitForOutcome === undefined ? {} : { waitForOther: deps.store.waitForOutcome.bind(deps.store) }),
    idempotencyKey: deps.idempotencyKey,
    busyPollMs: options.busyPollMs ?? 250,
    settleMs: options.settleMs ?? DEFAULT_SETTLE_MS,
    freshSince: options.freshSince ?? null,
    gate: new ResumeGate(resuming.map((c) => c.index)),
    health,
  });
  const queued = new Set<number>();
  const enqueueNow = (company: Company): void => {
    if (options.dryRun || queued.has(company.index) || !state.needsEnrich(company)) return;
    queued.add(company.index);
    progress({ type: 'enrich-queued' });
    tasks.track(enrich(company), false);
  };
  // A company first met mid-run is planned from the store first: its enrich (from this match or an alias's) waits for that plan.
  const plans = new Map<number, Promise<void>>();
  const planCompany = (company: Company): void => {
    const plan = Promise.resolve(deps.planCompany(company));
    plans.set(company.index, plan);
    tasks.track(plan, false);
  };
  const enqueueEnrich = (company: Company): void => {
    const plan = plans.get(company.index);
    if (plan === undefined) enqueueNow(company);
    else tasks.track(plan.then(() => enqueueNow(company)), false);
  };
  const match = matchStep({ state, client: deps.client, attempt, stops, progress, record, planCompany, enqueueEnrich, resting: (on) => tasks.rest(on) });
  return { resuming, enqueueEnrich, match };
}
