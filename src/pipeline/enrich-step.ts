import { ApiError, InsufficientCreditsError, RateLimitedError, UnusablePaidAnswerError, ValidationError } from '../api/errors.js';
import type { ServiceClient } from '../api/client.js';
import type { Claim, EnrichEvent, IntentEvent, StoreEvent } from '../store/types.js';
import type { Attempter } from './attempt.js';
import type { Clock } from './clock.js';
import type { Health } from './health.js';
import type { ProgressSink } from './progress.js';
import { holdsReservation, keyOf, keyVerdict, nextPaidStep, placeSpent, settleWait, type Settle, type TimedIntent } from './run-purchase.js';
import type { Company, RunState } from './state.js';
import type { Stops } from './stops.js';

export interface EnrichStepDeps {
  state: RunState;
  client: ServiceClient;
  attempt: Attempter;
  stops: Stops;
  budget: CreditBudget;
  maxCredits: number | null;
  clock: Clock;
  progress: ProgressSink;
  /** Wall-clock ms since the epoch: when a record was bought. */
  now: () => number;
  record(event: StoreEvent): void;
  /** Writes an intent durably and answers whether this run may buy under it. */
  claim(intent: IntentEvent): Promise<Claim>;
  /** This run's claims may have been taken over while it was paused: claim again first. */
  leaseLapsed(): boolean;
  /** Its lapses so far: a claim made in an earlier one must be made again before its request is sent. */
  leaseEpoch(): number;
  /** Renews it (store/heartbeat.ts); rejects if the store cannot be written, which ends the run. */
  renewLease(): Promise<void>;
  idempotencyKey(company: Company, version: number): string;
  /** How long to wait before asking again about a purchase another live run holds open. */
  busyPollMs: number;
  /** Waits for another run's outcome of a company (or busyPollMs); by default, sleeps. */
  waitForOther?(company: string, ms: number, signal: AbortSignal): Promise<unknown>;
  /** How long a paid call whose answer was lost may go on at the service (pipeline/run-purchase.ts). */
  settleMs: number;
  /** The freshness rule every intent carries (pipeline/plan.ts freshSince). */
  freshSince: number | null;
  /** Resumed keys first: a new purchase waits until each has had an answer. */
  gate: ResumeGate;
  /** The circuit breaker, and whether the service has answered afresh since a moment (the settle rule). */
  health: Health;
}

/** A place taken under --max-credits, and the keys retired on the settle rule it has paid for. */
interface Place {
  held: boolean;
  counted: number;
}

interface Bought {
  charged: number;
  /** The last attempt got the service's own answer (a 2xx or a problem document). */
  answered: boolean;
}

/** How many times the settle rule's probe is tried (client.probeEnrich). */
const PROBE_ATTEMPTS = 3;

/** The longest a run waits for a lost call to settle before it gives the company up for now. */
const MAX_SETTLE_WAIT_MS = 120_000;

/** The paid enrich of one matched company: claim the purchase, buy it once, record the outcome. */
export function enrichStep(deps: EnrichStepDeps): (company: Company) => Promise<void> {
  const step = new EnrichStep(deps);
  return (c) => step.enrich(c);
}

class EnrichStep {
  private readonly state: RunState;
  private readonly stops: Stops;
  private readonly progress: ProgressSink;
  private readonly record: (event: StoreEvent) => void;

  constructor(private readonly deps: EnrichStepDeps) {
    this.state = this.deps.state;
    this.stops = this.deps.stops;
    this.progress = this.deps.progress;
    this.record = this.deps.record;
  }

  /** Companies whose claim is out or purchase open, each (maybe) holding a budget reservation: a capped claim waits while any is left, since a miss gives its room back. */
  private readonly reserving = new Set<number>();
  private roomWaiters: (() => void)[] = [];
  /** A monthly cap turned a claim away with nothing of its own left open: no new purchase starts, but one already holding its reservation finishes (else it stays held). */
  private capped = false;

  private wakeAll(): void {
    const waiters = this.roomWaiters;
    this.roomWaiters = [];
    for (const wake of waiters) wake();
  }

  /**
   * `wake`: waiters ask again when `freed` (a purchase charged nothing) or none of this run's is left open. Not after a claim was
   * itself turned away: two would wake each other for ever. `wakes` counts them, so a claim out during one asks again.
   */
  private wakes = 0;
  private letGo(c: Company, wake = true, freed = false): void {
    if (this.reserving.delete(c.index) && wake && (freed || this.reserving.size === 0)) {
      this.wakes++;
      this.wakeAll();
    }
  }

  /** Resolves when another of this run's reservations is done with, or the run stops buying. */
  private nextRoom(): Promise<void> {
    const signal = this.stops.paid.signal;
    return new Promise<void>((resolve) => {
      if (signal.aborted) return resolve();
      const done = (): void => {
        signal.removeEventListener('abort', done);
        resolve();
      };
      this.roomWaiters.push(done);
      signal.addEventListener('abort', done, { once: true });
    });
  }

  // The open intent's key as written (a resume must not recompute it, should the derivation change), else a new one.
  private keyOf(c: Company): string {
    return keyOf(c.purchase) ?? this.deps.idempotencyKey(c, c.keyVersion);
  }

  /** Makes this run the owner with a durable intent; another live run may own it (wait), have bought it since the plan (reuse), or moved its key (adopt). False: nothing left to buy. */
  private async claimPurchase(c: Company, place: Place): Promise<boolean> {
    // Said once per company while it waits, so a wait on another run is never silent.
    let waiting = false;
    try {
      for (;;) {
        if (this.stops.paid.signal.aborted || !this.state.needsEnrich(c)) return false;
        if (this.capped && !holdsReservation(c.purchase)) return false;
        const intent: TimedIntent = { type: 'intent', company: c.domain, generation: c.generation, keyVersion: c.keyVersion, key: this.keyOf(c), at: this.deps.now(), freshSince: this.deps.freshSince, settleMs: this.deps.settleMs };
        this.reserving.add(c.index);
        const seen = this.wakes;
        const claim = await this.deps.claim(intent);
        if (claim.kind !== 'ok') this.letGo(c, claim.kind !== 'capped');
        // Claimed (a takeover leaves the key uncertain), reused, adopted where it stands, or held by another run.
        this.state.claimAnswered(c, intent, claim);
        switch (claim.kind) {
          case 'ok':
            return true;
          case 'held':
            return false;
          case 'capped':
            // No room under a monthly cap: nothing written or sent. While this run has purchases open one may free room,
            // so ask again then; with none, stop buying (exit 4), leaving no reservation behind.
            if (this.wakes !== seen) continue;
            if (this.reserving.size > 0) {
              // Its --max-credits place is given up meanwhile: the purchase waited on may need one.
              if (place.held) {
                this.deps.budget.close(0);
                place.held = false;
              }
              await this.nextRoom();
              place.held = await this.acquire();
              if (!place.held) return false;
              continue;
            }
            this.stops.note({ reason: 'monthly', person: claim.person, cap: claim.cap });
            this.capped = true;
            this.wakeAll();
            return false;
          case 'moved':
            continue;
          case 'pruned':
            this.stops.stopAll({ reason: 'unavailable', message: 'the store was pruned while this run was paused (its keys could repeat earlier ones); nothing more was sent, run the same command again', worked: true });
            return false;
          case 'busy':
            // The live run that holds it confirms its key itself: nothing new waits on this one.
            this.deps.gate.arrive(c.index);
            if (!waiting) {
              waiting = true;
              const run = claim.pid === undefined ? {} : { run: `pid ${claim.pid}${claim.host === undefined ? '' : ` on ${claim.host}`}` };
              this.progress({ type: 'waiting', by: 1, ...run });
            }
            try {
              const signal = this.stops.paid.signal;
              await (this.deps.waitForOther?.(c.domain, this.deps.busyPollMs, signal) ?? this.deps.clock.sleep(this.deps.busyPollMs, signal));
              if (signal.aborted) return false;
            } catch {
              return false;
            }
        }
      }
    } finally {
      if (waiting) this.progress({ type: 'waiting', by: -1 });
    }
  }

  private recordFailure(c: Company, error: unknown, verdict: 'retired' | 'settled' | 'kept'): void {
    const answer = error instanceof ApiError ? error : undefined;
    const lost = answer === undefined || !answer.definitive;
    this.record({
      type: 'enrich',
      company: c.domain,
      generation: c.generation,
      keyVersion: c.keyVersion,
      status: 'error',
      code: answer?.code ?? 'error',
      verdict: verdict === 'kept' ? 'kept' : 'retired',
      ...(verdict === 'settled' ? { unconfirmed: true } : {}),
      // A 422 ends the purchase only under a key nothing can have charged; under a lost key the
      // purchase stays open, its key kept, for a later run to finish (no new key may buy it).
      ...(answer instanceof ValidationError && verdict !== 'kept' ? { final: true } : {}),
      ...(lost ? { lost: true, settleMs: this.deps.settleMs } : {}),
      at: this.deps.now(),
    });
  }

  /** A paid answer that cannot be used: the purchase closes as failed, its credit spent, no record kept (the row says bad_response). */
  private recordUnusable(c: Company, error: UnusablePaidAnswerError): void {
    this.progress({ type: 'charged', credits: error.charged });
    this.record({ type: 'enrich', company: c.domain, generation: c.generation, keyVersion: c.keyVersion, status: 'error', code: error.code, charged: error.charged, final: true, at: this.deps.now() });
  }

  private settleRule(): Settle {
    return { now: this.deps.now(), afterMs: this.deps.settleMs, answeredSince: (at) => this.deps.health.answeredSince(at) };
  }

  /** Renews the run's lease; false if the run stops meanwhile (Ctrl-C is not held up by a slow store). A renew failure (store unwritable) ends the run. */
  private async renewLease(): Promise<boolean> {
    const signal = this.stops.paid.signal;
    if (signal.aborted) return false;
    let onAbort = (): void => {};
    const stopped = new Promise<false>((resolve) => {
      onAbort = () => resolve(false);
      signal.addEventListener('abort', onAbort, { once: true });
    });
    try {
      return await Promise.race([this.deps.renewLease().then(() => true), stopped]);
    } finally {
      signal.removeEventListener('abort', onAbort);
    }
  }

  /** Takes a place under --max-credits; false (and the run stopped at the cap) when none is left. */
  private async acquire(): Promise<boolean> {
    if (await this.deps.budget.acquire(this.stops.paid.signal)) return true;
    if (this.deps.budget.exhausted) this.stops.stopPaid({ reason: 'budget', limit: this.deps.maxCredits ?? 0 });
    return false;
  }

  /** A key retired on the settle rule may have been charged: its --max-credits place is spent, and the new key's attempt needs its own. False: none left. */
  private async replaceSpentPlace(c: Company, place: Place): Promise<boolean> {
    this.deps.budget.close(c.unconfirmed - place.counted);
    place.counted = c.unconfirmed;
    place.held = await this.acquire();
    return place.held;
  }

  /**
   * One purchase, retries included: before each attempt leaves, the purchase says what comes next (run-purchase.ts nextPaidStep) and it
   * is done; then the request, then its outcome recorded. The charge, and whether the service answered last. `arrived` tells the resume gate.
   */
  private async buy(c: Company, sentKeys: Set<string>, place: Place, arrived: () => void, claimed: () => void): Promise<Bought> {
    let lostKey: { lostAt: number | null } | undefined;
    // A claim holds only in the lease epoch it was made in (store/heartbeat.ts): a lapse since, even one another request saw first or
    // the timer's beat found, means renewing and claiming again, which `stale` finds as the request leaves its slot.
    let claimedIn: number | null = null;
    let lapsedInQueue = false;
    const call = (signal: AbortSignal) => {
      const key = this.keyOf(c);
      // A key that may have been sent unanswered may answer with a stored outcome: its answer is weighed as such (health.ts).
      const p = c.purchase;
      lostKey = p.state === 'uncertain' ? { lostAt: p.lostAt } : undefined;
      sentKeys.add(key);
      return this.deps.client.enrich(c.domain, { idempotencyKey: key, signal });
    };
    // The intent is on disk before the paid request leaves, so a crash resumes with the same key and the service replays instead of charging.
    const before = async (): Promise<boolean> => {
      let lapsed = lapsedInQueue;
      lapsedInQueue = false;
      let claimedNow = false;
      for (;;) {
        // Asked at every step: a wait for a new place may outlast the lease.
        lapsed ||= this.deps.leaseLapsed();
        const epoch = this.deps.leaseEpoch();
        switch (nextPaidStep(c, { counted: place.counted, lapsed, claimedIn, epoch, claimedNow })) {
          case 'send':
            return true;
          case 'place':
            if (!(await this.replaceSpentPlace(c, place))) return false;
            break;
          case 'renew':
            if (!(await this.renewLease())) return false;
            [lapsed, claimedIn] = [false, null];
            break;
          case 'claim':
            claimedIn = epoch;
            if (!(await this.claimPurchase(c, place))) return false;
            claimedNow = true;
            claimed();
        }
      }
    };
    const result = await this.deps.attempt('enrich', this.stops.paid.signal, call, {
      before,
      // Asked again as the request leaves: queued behind others or out a pause, it may have waited
      // past the lease, and a run elsewhere may have taken the purchase over and moved its key on.
      stale: () => (lapsedInQueue = this.deps.leaseLapsed() || claimedIn !== this.deps.leaseEpoch()),
      lostKey: () => lostKey,
      failed: (error) => {
        arrived();
        if (error instanceof UnusablePaidAnswerError) {
          this.recordUnusable(c, error);
          return undefined;
        }
        const verdict = keyVerdict(c, error, this.settleRule());
        if (verdict === null) return undefined;
        // An error under a lost key, with nothing since showing the paid endpoint up, may be a replay or an outage: probe now,
        // before the retries and the breaker decide for want of it.
        const p = c.purchase;
        if (verdict === 'kept' && p.state === 'uncertain' && p.lostAt !== null && error instanceof ApiError && error.definitive) void this.probe(p.lostAt);
        this.recordFailure(c, error, verdict);
        return verdict === 'settled' ? 'again' : undefined;
      },
    });
    arrived();
    if (result.kind === 'stopped') return { charged: 0, answered: false };
    if (result.kind === 'error') {
      if (result.error instanceof UnusablePaidAnswerError) return { charged: result.error.charged, answered: true };
      // 429s are not recorded one by one; when they exhaust the retries the company must still
      // end as an error (so the run exits 3 and a rerun retries it), and a 429 never charges.
      if (result.error instanceof RateLimitedError) this.recordFailure(c, result.error, c.purchase.state === 'uncertain' ? 'kept' : 'retired');
      // A 402 under a key that may hold an earlier outcome may be that outcome replayed: it says
      // nothing of today's balance. A fresh key's 402 will stop the run if the balance is gone.
      if (!(c.purchase.state === 'uncertain' && result.error instanceof InsufficientCreditsError)) this.stops.stopFor(result.error, 'enrich');
      return { charged: 0, answered: result.error instanceof ApiError && result.error.definitive };
    }
    const answer = result.value;
    const charged = answer.credits_charged;
    this.progress({ type: 'charged', credits: charged });
    // One literal, not a spread of a base and more fields (V8 builds that shape slowly, per purchase).
    const hit = answer.matched && answer.company !== null;
    const event: EnrichEvent = { type: 'enrich', company: c.domain, generation: c.generation, keyVersion: c.keyVersion, status: hit ? 'hit' : 'miss', charged, at: this.deps.now(), keyUsed: this.keyOf(c) };
    if (Number.isFinite(answer.credits_remaining)) event.remaining = answer.credits_remaining;
    if (hit && answer.company !== null) event.record = answer.company;
    this.record(event);
    return { charged, answered: true };
  }

  /** Gives back a claim nothing was sent under, so it is neither "at risk" nor held from others. */
  private unclaim(c: Company, sentKeys: ReadonlySet<string>): void {
    const p = c.purchase;
    if (p.state !== 'claimed' || sentKeys.has(p.key)) return;
    this.record({ type: 'unclaim', company: c.domain, generation: c.generation, keyVersion: c.keyVersion, key: p.key });
  }

  /** A key kept only because an earlier attempt may still be running: wait out the rest of its settle (at most two minutes), so the next error retires it. */
  private async settleWait(c: Company, answered: boolean): Promise<boolean> {
    const wait = answered && !this.stops.paid.signal.aborted ? settleWait(c.purchase, this.deps.now(), this.deps.settleMs, MAX_SETTLE_WAIT_MS) : null;
    if (wait === null) return false;
    try {
      if (wait.ms > 0) await this.deps.clock.sleep(wait.ms, this.stops.paid.signal);
    } catch {
      return false;
    }
    // The settle rule also needs the paid endpoint to have answered afresh since the loss. When
    // nothing else this run sends gives that (every company left is such a key), it is asked.
    await this.probe(wait.lostAt);
    return true;
  }

  private probing: Promise<void> | null = null;

  /**
   * Asks whether the paid endpoint answers now (client.probeEnrich: an enrich it cannot bill) when a key lost at `lostAt` needs that to
   * settle. A 4xx moves Health's `answeredSince` on; a 500 or no answer leaves keys kept. One at a time.
   */
  private probe(lostAt: number): Promise<void> {
    const { client, health } = this.deps;
    if (client.probeEnrich === undefined || health.answeredSince(lostAt)) return Promise.resolve();
    const ask = client.probeEnrich.bind(client);
    const done = (): void => {
      this.probing = null;
    };
    // A few tries at most: a probe the rate limiter keeps turning away is no answer, and the key stays kept.
    this.probing ??= this.deps.attempt('enrich', this.stops.paid.signal, (signal) => ask({ signal }), { limit: PROBE_ATTEMPTS }).then(done, done);
    return this.probing;
  }

  async enrich(c: Company): Promise<void> {
    const arrived = (): void => this.deps.gate.arrive(c.index);
    try {
      if (!this.deps.gate.holds(c.index)) await this.deps.gate.wait(this.stops.paid.signal);
      await this.enrichCompany(c, arrived);
    } finally {
      arrived();
    }
  }

  private async enrichCompany(c: Company, arrived: () => void): Promise<void> {
    // Whether this run ever held the purchase, so it lets go of it if it could not finish.
    let heldByUs = false;
    for (let round = 0; round < 2; round++) {
      // The credit first: an intent is written only for a call this run is allowed to make.
      if (!(await this.acquire())) return;
      const place: Place = { held: true, counted: c.unconfirmed };
      let outcome: Bought = { charged: 0, answered: false };
      // Every key a request went out under, so only an intent nothing was sent under is given back.
      const sentKeys = new Set<string>();
      try {
        outcome = await this.buy(c, sentKeys, place, arrived, () => (heldByUs = true));
      } finally {
        if (place.held) this.deps.budget.close(placeSpent(c, outcome.charged, place.counted));
        this.unclaim(c, sentKeys);
        this.letGo(c, true, !(outcome.charged > 0));
      }
      if (sentKeys.size === 0 && !this.state.needsEnrich(c)) break;
      if (round === 1 || !(await this.settleWait(c, outcome.answered))) break;
    }
    // Not bought this run: another run may take it over now, rather than wait for this one to end.
    if (heldByUs && this.state.needsEnrich(c)) this.record({ type: 'release', company: c.domain, generation: c.generation });
    if (!this.state.needsEnrich(c) || c.status === 'error') this.progress({ type: 'enriched' });
  }
}

/**
 * --max-credits: a paid call starts only if this invocation would stay within the cap were it and every call in flight charged (lost
 * answers count as charged). While in-flight calls fill the cap callers wait (a miss frees its place); once spent reaches it, all are told no.
 */
export class CreditBudget {
  private spent = 0;
  private reserved = 0;
  private waiters: (() => void)[] = [];

  constructor(private readonly limit: number | null) {}

  get exhausted(): boolean {
    return this.limit !== null && this.spent >= this.limit;
  }

  /** True when a call may start (and holds a place until closed), false when the cap is spent. */
  async acquire(signal: AbortSignal): Promise<boolean> {
    for (;;) {
      if (signal.aborted || this.exhausted) return false;
      if (this.limit === null || this.spent + this.reserved < this.limit) {
        this.reserved++;
        return true;
      }
      await new Promise<void>((resolve) => {
        const done = (): void => {
          signal.removeEventListener('abort', done);
          resolve();
        };
        this.waiters.push(done);
        signal.addEventListener('abort', done, { once: true });
      });
    }
  }

  /** Closes a place with what the call cost (0 for a miss or a call never sent). */
  close(charged: number): void {
    this.reserved = Math.max(0, this.reserved - 1);
    this.spent += charged;
    const waiters = this.waiters;
    this.waiters = [];
    for (const wake of waiters) wake();
  }
}

/** Keys earlier runs may have been charged under are answered first: new purchases wait until each has its first answer, so a failing idempotency layer charges nothing new. */
export class ResumeGate {
  private readonly waiting: Set<number>;
  private opened: Promise<void>;
  private open: () => void = () => {};

  constructor(resuming: Iterable<number>) {
    this.waiting = new Set(resuming);
    this.opened = new Promise<void>((resolve) => (this.open = resolve));
    if (this.waiting.size === 0) this.open();
  }

  holds(index: number): boolean {
    return this.waiting.has(index);
  }

  /** The company at `index` got its first answer, or is done: one fewer to wait for. */
  arrive(index: number): void {
    if (this.waiting.delete(index) && this.waiting.size === 0) this.open();
  }

  /** Resolves once every resumed company has arrived, or the signal stops the run. */
  wait(signal: AbortSignal): Promise<void> {
    if (this.waiting.size === 0 || signal.aborted) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const done = (): void => {
        signal.removeEventListener('abort', done);
        resolve();
      };
      signal.addEventListener('abort', done, { once: true });
      void this.opened.then(done);
    });
  }
}
