import { setMaxListeners } from 'node:events';
import {
  ApiError,
  InsufficientCreditsError,
  InsufficientScopeError,
  InvalidTokenError,
  RateLimitedError,
  ValidationError,
} from '../api/errors.js';
import type { ServiceClient } from '../api/client.js';
import { decideRetry, type RetryPolicy } from '../api/retry.js';
import type { EventEntry } from '../journal/entries.js';
import type { Appended } from '../journal/writer.js';
import { CreditBudget } from './budget.js';
import type { Clock } from './clock.js';
import type { Progress } from './progress.js';
import { StoppedError, type Lane, type Scheduler } from './scheduler.js';
import { keyVerdict } from './keys.js';
import type { Company, RunState } from './state.js';

/** Why a run ended early. Each maps to an exit code and a "what now" message. */
export type Stop =
  | { reason: 'credits'; balance: number | null; required: number | null }
  | { reason: 'budget'; limit: number }
  | { reason: 'auth'; code: string; message: string }
  | { reason: 'interrupted' };

export interface JournalSink {
  append(entry: EventEntry, durable?: boolean): Appended;
}

export interface ExecuteOptions {
  dryRun: boolean;
  /** Credits this invocation may spend; null for no cap. */
  maxCredits: number | null;
  retry: RetryPolicy;
  /** Matches queued ahead of the scheduler: enough to keep it busy, few enough to stay small. */
  matchWindow: number;
  /** After an interrupt, how long requests already sent may take before they are abandoned. */
  graceMs: number;
}

export interface ExecuteDeps {
  client: ServiceClient;
  scheduler: Scheduler;
  journal: JournalSink;
  clock: Clock;
  random: () => number;
  idempotencyKey(company: Company, version: number): string;
  progress: Progress;
}

type Attempt<T> = { kind: 'ok'; value: T } | { kind: 'error'; error: unknown } | { kind: 'stopped' };

/** A controller whose signal every queued request listens to: thousands, by design. */
function sharedController(): AbortController {
  const controller = new AbortController();
  setMaxListeners(0, controller.signal);
  return controller;
}

/** When several reasons stop a run, the exit code reports the one that needs acting on first. */
const PRECEDENCE: Record<Stop['reason'], number> = { interrupted: 4, auth: 3, credits: 2, budget: 1 };

class Stops {
  first: Stop | null = null;
  readonly paid = sharedController();
  readonly all = sharedController();

  stopPaid(stop: Stop): void {
    if (this.first === null || PRECEDENCE[stop.reason] > PRECEDENCE[this.first.reason]) this.first = stop;
    this.paid.abort(new StoppedError(stop.reason));
  }

  stopAll(stop: Stop): void {
    this.stopPaid(stop);
    this.all.abort(new StoppedError(stop.reason));
  }
}

/**
 * Matches every domain still owed a match and enriches every matched company still owed a
 * record, in one pipelined pass: an enrich starts as soon as its match hits. Outcomes go to the
 * journal (and through it to the state) as they happen; nothing here throws for a row.
 */
export async function execute(state: RunState, options: ExecuteOptions, deps: ExecuteDeps, interrupt: AbortSignal): Promise<Stop | null> {
  const { client, scheduler, clock, progress } = deps;
  const stops = new Stops();
  const budget = new CreditBudget(options.maxCredits);
  // Requests already sent are let finish; this aborts them only once the grace period is over.
  const inflight = sharedController();
  let graceTimer: NodeJS.Timeout | undefined;
  const onInterrupt = (): void => {
    stops.stopAll({ reason: 'interrupted' });
    graceTimer = setTimeout(() => inflight.abort(new StoppedError('interrupted')), options.graceMs);
    graceTimer.unref();
  };
  if (interrupt.aborted) onInterrupt();
  else interrupt.addEventListener('abort', onInterrupt, { once: true });

  const record = (entry: EventEntry, durable = false): Appended => {
    const appended = deps.journal.append(entry, durable);
    state.apply(entry, appended.offset, appended.length);
    return appended;
  };

  /** Stops the run for answers about the account rather than the company; true if it did. */
  const stopFor = (error: unknown, lane: Lane): boolean => {
    if (error instanceof InvalidTokenError || error instanceof InsufficientScopeError) {
      stops.stopAll({ reason: 'auth', code: error.code, message: error.message });
      return true;
    }
    if (error instanceof InsufficientCreditsError) {
      const stop: Stop = { reason: 'credits', balance: error.balance ?? null, required: error.required ?? null };
      // A free call refused for credits means the account can do nothing at all.
      if (lane === 'match') stops.stopAll(stop);
      else stops.stopPaid(stop);
      return true;
    }
    return false;
  };

  /**
   * One logical call with retries; each attempt is one scheduled request. `failed` sees every
   * failure first, and may answer "again": the failure describes the past (a replay), so the
   * next attempt goes at once, and it neither counts against the retries nor stops the run.
   */
  async function attempt<T>(lane: Lane, signal: AbortSignal, call: (s: AbortSignal) => Promise<T>, hooks: {
    before?: () => Promise<void>;
    failed?: (error: unknown) => 'again' | undefined;
  } = {}): Promise<Attempt<T>> {
    const attempts = { failures: 0, rateLimited: 0 };
    for (;;) {
      if (signal.aborted) return { kind: 'stopped' };
      await hooks.before?.();
      try {
        return { kind: 'ok', value: await scheduler.run(lane, () => call(inflight.signal), signal) };
      } catch (error) {
        if (error instanceof StoppedError || (inflight.signal.aborted && !(error instanceof ApiError && error.definitive))) {
          return { kind: 'stopped' };
        }
        if (hooks.failed?.(error) === 'again') continue;
        if (error instanceof RateLimitedError) {
          attempts.rateLimited++;
          // Shown as a pause by the UI, so a wait on the service never looks like a hang.
          progress.pausedUntil = Math.max(progress.pausedUntil, clock.now() + error.retryAfterSeconds * 1000);
        } else attempts.failures++;
        const decision = decideRetry(error, attempts, options.retry, deps.random);
        if (!decision.retry) return { kind: 'error', error };
        progress.retries++;
        try {
          await clock.sleep(decision.delayMs, signal);
        } catch {
          return { kind: 'stopped' };
        }
      }
    }
  }

  // --- tasks in flight, with a window on queued matches ---
  let outstanding = 0;
  let matchesOutstanding = 0;
  let wake: (() => void) | null = null;
  const notify = (): void => {
    const w = wake;
    wake = null;
    w?.();
  };
  const track = (task: Promise<void>, isMatch: boolean): void => {
    outstanding++;
    if (isMatch) matchesOutstanding++;
    task
      .catch((error: unknown) => {
        // A task only throws when the journal cannot be written: stop everything, report it.
        failure ??= error;
        stops.stopAll({ reason: 'interrupted' });
      })
      .finally(() => {
        outstanding--;
        if (isMatch) matchesOutstanding--;
        notify();
      });
  };
  let failure: unknown = null;
  const queuedForEnrich = new Set<number>();

  const enqueueEnrich = (company: Company): void => {
    if (options.dryRun || queuedForEnrich.has(company.index) || !state.needsEnrich(company)) return;
    queuedForEnrich.add(company.index);
    progress.enrichTotal++;
    track(enrichCompany(company), false);
  };

  async function matchDomain(d: number): Promise<void> {
    const domain = state.domains[d] as string;
    const result = await attempt('match', stops.all.signal, (signal) => client.match(domain, { signal }));
    if (result.kind === 'stopped') return;
    // A domain whose match was refused for the account stays owed, and shows as skipped.
    if (result.kind === 'error' && stopFor(result.error, 'match')) return;
    progress.matchDone++;
    if (result.kind === 'error') {
      const code = result.error instanceof ApiError ? result.error.code : 'error';
      record({ t: 'match', d: domain, s: 'error', code, final: result.error instanceof ValidationError });
      return;
    }
    const company = result.value.company;
    if (!result.value.matched || company === null) {
      record({ t: 'match', d: domain, s: 'miss' });
      return;
    }
    const canonical = company.domain.trim().toLowerCase().replace(/\.$/, '');
    record({ t: 'match', d: domain, s: 'hit', c: canonical, n: company.name });
    const target = state.company(canonical);
    if (target !== undefined) enqueueEnrich(target);
  }

  async function enrichCompany(company: Company): Promise<void> {
    if (!(await budget.acquire(stops.paid.signal))) {
      if (budget.exhausted) stops.stopPaid({ reason: 'budget', limit: options.maxCredits ?? 0 });
      return;
    }
    let charged = 0;
    // The key an attempt goes under: the open intent's as written (a resume must not recompute
    // it, in case the derivation ever changes), else a new one for the current version.
    const key = (): string => (company.intentOpen && company.intentKey !== null ? company.intentKey : deps.idempotencyKey(company, company.keyVersion));
    const recordFailure = (error: unknown, verdict: 'retired' | 'replayed' | 'kept'): void => {
      const answer = error instanceof ApiError ? error : undefined;
      record({
        t: 'enrich',
        c: company.domain,
        v: company.keyVersion,
        s: 'error',
        code: answer?.code ?? 'error',
        ...(answer?.requestId === undefined ? {} : { rid: answer.requestId }),
        key: verdict === 'kept' ? 'kept' : 'retired',
        ...(answer instanceof ValidationError ? { final: true } : {}),
      });
    };
    try {
      const result = await attempt(
        'enrich',
        stops.paid.signal,
        (signal) => client.enrich(company.domain, { idempotencyKey: key(), signal }),
        {
          // The intent is on disk before the paid request leaves: a crash after this point
          // resumes with the same key, and the service replays instead of charging again.
          before: async () => {
            if (company.intentOpen) return;
            await record({ t: 'intent', c: company.domain, v: company.keyVersion, key: key() }, true).written;
          },
          failed: (error) => {
            const verdict = keyVerdict(company, error);
            if (verdict === null) return undefined;
            recordFailure(error, verdict);
            return verdict === 'replayed' ? 'again' : undefined;
          },
        },
      );
      if (result.kind === 'stopped') return;
      progress.enrichDone++;
      if (result.kind === 'error') {
        // 429s are not journaled one by one; when they exhaust the retries the company must still
        // end as an error (so the run exits 3 and a rerun retries it), and a 429 never charges.
        if (result.error instanceof RateLimitedError) recordFailure(result.error, company.keyUncertain ? 'kept' : 'retired');
        stopFor(result.error, 'enrich');
        return;
      }
      const answer = result.value;
      charged = answer.credits_charged;
      progress.credits += charged;
      const remaining = Number.isFinite(answer.credits_remaining) ? { remaining: answer.credits_remaining } : {};
      if (answer.matched && answer.company !== null) {
        record({ t: 'enrich', c: company.domain, v: company.keyVersion, s: 'hit', charged, ...remaining, company: answer.company });
      } else {
        record({ t: 'enrich', c: company.domain, v: company.keyVersion, s: 'miss', charged, ...remaining });
      }
    } finally {
      // A key left uncertain may have been charged: --max-credits counts it as spent.
      budget.settle(company.keyUncertain && company.status !== 'hit' && company.status !== 'miss' ? Math.max(charged, 1) : charged);
    }
  }

  // Companies the journal already matched but never finished enriching go first.
  for (const company of state.companies) enqueueEnrich(company);

  for (let d = 0; d < state.domainCount; d++) {
    if (stops.all.signal.aborted) break;
    if (!state.needsMatch(d)) continue;
    while (matchesOutstanding >= options.matchWindow && !stops.all.signal.aborted) {
      await new Promise<void>((resolve) => (wake = resolve));
    }
    if (stops.all.signal.aborted) break;
    track(matchDomain(d), true);
  }
  while (outstanding > 0) await new Promise<void>((resolve) => (wake = resolve));

  interrupt.removeEventListener('abort', onInterrupt);
  if (graceTimer !== undefined) clearTimeout(graceTimer);
  if (failure !== null) throw failure;
  return stops.first;
}
