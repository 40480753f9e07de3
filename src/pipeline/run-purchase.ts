import { ApiError, IN_PROGRESS, RateLimitedError } from '../api/errors.js';
import { longest } from '../store/purchase.js';
import type { Claim, EnrichEvent, HeldCompany, IntentEvent, Purchase } from '../store/types.js';
import type { CompanyPlan } from './plan.js';

/**
 * A company's purchase as this run knows it, with its transitions, written once and pure (RunState applies them). The states are
 * store/purchase.ts's seen from one run, plus `released` (this run's intent let go unanswered; a later run resumes it as uncertain)
 * and `reused` (the store's record will do). `uncertain` keeps its key for every retry and resume (null: a 0.1 journal wrote none);
 * `failed` has `mayBeCharged` (closed while uncertain) and `earlier` (an earlier run's unusable answer). Open states carry the last `error`.
 */
export type RunPurchase =
  | { readonly state: 'unclaimed'; readonly error: string | null }
  | { readonly state: 'claimed'; readonly key: string; readonly error: string | null }
  | { readonly state: 'released'; readonly key: string; readonly error: string | null }
  | { readonly state: 'uncertain'; readonly key: string | null; readonly lostAt: number | null; readonly settleMs: number | null; readonly error: string | null }
  | { readonly state: 'bought' }
  | { readonly state: 'reused' }
  | { readonly state: 'missed' }
  | { readonly state: 'failed'; readonly error: string; readonly mayBeCharged: boolean; readonly earlier?: true };

export type OpenPurchase = Extract<RunPurchase, { state: 'unclaimed' | 'claimed' | 'released' | 'uncertain' }>;

/** What the run knows of a company's purchase: its state, and the data the transitions move with it. */
export interface KnownPurchase {
  readonly purchase: RunPurchase;
  /** The purchase generation this run buys (or bought) under: 1 at first, +1 per refresh. */
  readonly generation: number;
  /** Version of the Idempotency-Key the next (or the unanswered) attempt uses. */
  readonly keyVersion: number;
  /** The store holds an older record that this run refreshes. */
  readonly refresh: boolean;
  /** When the record shown was bought (ms since the epoch); null when none is held. */
  readonly boughtAt: number | null;
  /** Keys this run retired on the settle rule (keyVerdict, below): each may have been charged. */
  readonly unconfirmed: number;
}

/** What a transition changes; the rest stays. */
export type Move = Partial<KnownPurchase>;

const UNCLAIMED: RunPurchase = { state: 'unclaimed', error: null };
const BOUGHT: RunPurchase = { state: 'bought' };
const REUSED: RunPurchase = { state: 'reused' };
const MISSED: RunPurchase = { state: 'missed' };

export const FIRST_PURCHASE: KnownPurchase = { purchase: UNCLAIMED, generation: 1, keyVersion: 1, refresh: false, boughtAt: null, unconfirmed: 0 };

const unclaimed = (error: string | null): RunPurchase => (error === null ? UNCLAIMED : { state: 'unclaimed', error });
const failed = (error: string, mayBeCharged: boolean): RunPurchase => ({ state: 'failed', error, mayBeCharged });

export const isOpen = (p: RunPurchase): p is OpenPurchase => p.state === 'unclaimed' || p.state === 'claimed' || p.state === 'released' || p.state === 'uncertain';

/** The key of the intent on disk (or the uncertain one), as written: what every retry and resume sends. */
export const keyOf = (p: RunPurchase): string | null => (p.state === 'claimed' || p.state === 'released' || p.state === 'uncertain' ? p.key : null);

/** An attempt under the purchase's key may have been charged without an answer seen. */
export const chargeMayBeUnseen = (p: RunPurchase): boolean => p.state === 'uncertain' || (p.state === 'failed' && p.mayBeCharged);

/** The row's view: pending (nothing bought yet), hit, miss, or error. */
export function rowStatus(p: RunPurchase): 'pending' | 'hit' | 'miss' | 'error' {
  if (p.state === 'bought' || p.state === 'reused') return 'hit';
  if (p.state === 'missed') return 'miss';
  return p.error === null ? 'pending' : 'error';
}

export const errorOf = (p: RunPurchase): string | null => ('error' in p ? p.error : null);

/** Where a hit's record comes from: bought by this run, or reused from the store. */
export const sourceOf = (p: RunPurchase): 'bought' | 'store' | null => (p.state === 'bought' ? 'bought' : p.state === 'reused' ? 'store' : null);

/** What the store holds of a matched company, as the plan judged it. */
export function onPlan(k: KnownPurchase, plan: CompanyPlan): Move {
  switch (plan.action) {
    case 'reuse':
      return reused(plan.held);
    case 'no_match':
      return { purchase: plan.code === null ? MISSED : ({ state: 'failed', error: plan.code, mayBeCharged: false, earlier: true } as const), ...(plan.held === null ? {} : { boughtAt: plan.held.boughtAt }) };
    case 'buy': {
      const move: Move = { generation: plan.generation, refresh: plan.refresh, boughtAt: plan.held?.boughtAt ?? null };
      return plan.resume === null ? move : { ...move, ...adopted(k, plan.resume) };
    }
  }
}

/** The store's record will do: nothing to buy. */
const reused = (held: HeldCompany): Move => ({ purchase: REUSED, boughtAt: held.boughtAt, generation: held.generation });

/** Takes over a purchase's key state as the store has it (a resume, or another run's move). */
function adopted(k: KnownPurchase, p: Purchase): Move {
  if (p.outcome === 'miss') return { generation: p.generation, purchase: MISSED };
  if (p.outcome === 'failed') return { generation: p.generation, purchase: failed(p.errorCode ?? 'error', chargeMayBeUnseen(k.purchase)) };
  const error = errorOf(k.purchase);
  // An intent written by another invocation may have been sent before it stopped.
  const purchase: RunPurchase = p.intentKey !== null || p.uncertain ? { state: 'uncertain', key: p.intentKey, lostAt: p.lostAt, settleMs: p.settleMs, error } : unclaimed(error);
  return { generation: p.generation, keyVersion: p.keyVersion, purchase };
}

/** An intent as the run writes it: stamped with when it was written. */
export type TimedIntent = IntentEvent & { at: number };

/** What the store answered an intent: buy (claimed), another run bought it (reused), moved it on (adopted), or holds it (wait). */
export function onClaim(k: KnownPurchase, intent: TimedIntent, claim: Claim): Move {
  switch (claim.kind) {
    case 'ok':
      return claim.tookOver === true ? tookOver(k.purchase, intent, claim.settleMs) : onIntent(k.purchase, intent, claim.settleMs);
    case 'held':
      return reused(claim.held);
    case 'moved':
      return adopted(k, claim.purchase);
    case 'busy':
    case 'capped':
    case 'pruned':
      return {};
  }
}

/** An open purchase an attempt may already be under: it holds its budget reservation, and finishes without new room. */
export const holdsReservation = (p: RunPurchase): boolean => p.state === 'claimed' || p.state === 'uncertain' || p.state === 'released';

/** This run's intent is durable and its own: claimed, or still uncertain (with the store's settle, which another run may have lengthened). */
export function onIntent(p: RunPurchase, intent: IntentEvent, settleMs?: number): Move {
  if (!isOpen(p)) return {};
  const purchase: RunPurchase = p.state === 'uncertain' ? { ...p, key: intent.key, settleMs: longest(p.settleMs, settleMs) } : { state: 'claimed', key: intent.key, error: p.error };
  return { keyVersion: intent.keyVersion, purchase };
}

/**
 * Took over another run's intent under the same key: its last attempt may still be running, so the key is uncertain and the settle
 * counts from the takeover (an earlier loss would let a fresh error retire the key too soon, and a new key buy it twice).
 */
function tookOver(p: RunPurchase, intent: TimedIntent, settleMs: number | undefined): Move {
  if (!isOpen(p)) return {};
  const lostAt = Math.max((p.state === 'uncertain' ? p.lostAt : null) ?? 0, intent.at);
  return { keyVersion: intent.keyVersion, purchase: { state: 'uncertain', key: intent.key, lostAt, settleMs: longest(p.state === 'uncertain' ? p.settleMs : null, settleMs), error: p.error } };
}

/** An answer to a paid attempt, or its absence: the same event the store writes. `now`: a hit's bought_at when the event has none. */
export function onEnrich(k: KnownPurchase, e: EnrichEvent, now: number): Move {
  if (e.status === 'hit') return { purchase: BOUGHT, boughtAt: e.at ?? now };
  if (e.status === 'miss') return { purchase: MISSED };
  const error = e.code ?? 'error';
  if (e.verdict === 'retired') {
    // Proven uncharged: a service that stored this error under the key would replay it forever, so the next attempt gets a new one.
    const unconfirmed = k.unconfirmed + (e.unconfirmed === true ? 1 : 0);
    return { keyVersion: e.keyVersion + 1, unconfirmed, purchase: e.final === true ? failed(error, false) : unclaimed(error) };
  }
  // A final error under a key kept uncertain: closed, its key perhaps charged.
  if (e.final === true) return { purchase: failed(error, chargeMayBeUnseen(k.purchase)) };
  const p = k.purchase;
  const lostAt = e.lost === true && e.at !== undefined ? e.at : p.state === 'uncertain' ? p.lostAt : null;
  const settleMs = longest(p.state === 'uncertain' ? p.settleMs : null, e.lost === true ? e.settleMs : null);
  return { purchase: { state: 'uncertain', key: keyOf(p), lostAt, settleMs, error } };
}

/** This run is done with a purchase it could not finish: an intent it sent under is no longer its own. */
export function onRelease(p: RunPurchase): Move {
  return p.state === 'claimed' ? { purchase: { ...p, state: 'released' } } : {};
}

/** An intent this run sent nothing under, given back: nothing under its key is at risk (never an uncertain one). */
export function onUnclaim(p: RunPurchase): Move {
  return p.state === 'claimed' || p.state === 'released' ? { purchase: unclaimed(p.error) } : {};
}

// The key's rules: what an error proves about the Idempotency-Key it came under.

/** A paid call whose answer was lost is taken to have finished at the service after this. */
export const DEFAULT_SETTLE_MS = 60_000;

/**
 * What a failed paid attempt proves about its Idempotency-Key (docs/failures.md "A lost answer"):
 * - retired: every attempt under it got the service's own error, and errors never charge (spec 7.2): the next takes a new key
 *   (else a stored error would replay forever);
 * - settled: retired on the settle rule: an attempt lost its answer, and once it must have finished the service answered the key with an
 *   error. A charged key would have replayed its record (4.2), so only a broken idempotency layer could have charged it: it counts as
 *   possibly spent (`credits_unconfirmed`), and the new key goes at once (the error may be an old one replayed);
 * - kept: an attempt may have been charged unseen: every retry and resume reuses the key until it is replayed or settled;
 * - null: a 429, from the rate limiter in front, proves nothing.
 * A `requestId` proves nothing: the spec makes it optional (2.5) and never says it is unique.
 */
export type KeyVerdict = 'retired' | 'settled' | 'kept' | null;

export function keyVerdict(company: { readonly purchase: RunPurchase }, error: unknown, settle: Settle = NEVER): KeyVerdict {
  if (error instanceof RateLimitedError) return null;
  const p = company.purchase;
  // "Still running" under a key lost before: that attempt may yet be charged, whatever the settle time says.
  if (error instanceof ApiError && error.status === IN_PROGRESS && p.state === 'uncertain') return 'kept';
  if (!(error instanceof ApiError) || !error.definitive) return 'kept';
  if (p.state !== 'uncertain') return 'retired';
  return settled(p.lostAt, settle, p.settleMs) ? 'settled' : 'kept';
}

/** When a lost attempt must have finished: after it, the service's own error under the same key proves the key uncharged (a charged key replays its record). */
export interface Settle {
  now: number;
  /** How long a paid call may go on at the service after its answer was lost. */
  afterMs: number;
  /** Whether the service answered afresh after `at` (health.ts): an outage in front of the idempotency layer answers 500 to a charged key too. */
  answeredSince(at: number): boolean;
}
const NEVER: Settle = { now: 0, afterMs: Number.POSITIVE_INFINITY, answeredSince: () => false };

/** `lostAt`: when an attempt under the key last went unanswered (null: unknown). `recordedMs`: the sending run's settle, which a shorter one here never cuts. */
export function settled(lostAt: number | null, settle: Settle, recordedMs: number | null = null): boolean {
  return lostAt !== null && settle.now - lostAt >= settleAfter(settle.afterMs, recordedMs) && settle.answeredSince(lostAt);
}

/** How long a lost attempt may still run: this run's settle, or the sending run's if longer. */
export const settleAfter = (ownMs: number, recordedMs: number | null): number => Math.max(ownMs, recordedMs ?? 0);

// The paid call's steps: what it does next, asked of the purchase and where the call stands.

/** Where one paid call stands besides its purchase: its --max-credits place and the lease its claim was made under. */
export interface CallStand {
  /** Keys retired on the settle rule that the call's place has paid for so far. */
  readonly counted: number;
  /** The run's lease lapsed (a pause, a stall) since the call last asked: its claims may have been taken over. */
  readonly lapsed: boolean;
  /** The lease epoch the call's claim was made in; null before its first. */
  readonly claimedIn: number | null;
  /** The lease epoch now. */
  readonly epoch: number;
  /** The claim was answered for this attempt (an uncertain key stays uncertain once claimed). */
  readonly claimedNow: boolean;
}

/**
 * Before each attempt leaves: `place`, pay the place for a key the settle rule retired (it may have been charged) and take a new one;
 * `renew`, the lease lapsed, so renew it before claiming again; `claim`, write the intent (the first, one from an earlier lease, or an
 * uncertain key's, which dates its send); `send`, the request may leave.
 */
export function nextPaidStep(k: KnownPurchase, s: CallStand): 'place' | 'renew' | 'claim' | 'send' {
  if (k.unconfirmed !== s.counted) return 'place';
  if (s.lapsed) return 'renew';
  if (s.claimedIn === s.epoch && (s.claimedNow || k.purchase.state === 'claimed')) return 'send';
  return 'claim';
}

/** What a finished call's --max-credits place spent: its charge (at least one under a key perhaps charged unseen) and the keys retired on the settle rule since it was counted. */
export const placeSpent = (k: KnownPurchase, charged: number, counted: number): number => (chargeMayBeUnseen(k.purchase) ? Math.max(charged, 1) : charged) + k.unconfirmed - counted;

/**
 * After an answered attempt left a lost key kept: the wait until it settles, when the run should wait that out and try once more (at most
 * `maxMs`, and never longer than the settle itself); null when the company is left to a later run.
 */
export function settleWait(p: RunPurchase, now: number, ownMs: number, maxMs: number): { ms: number; lostAt: number } | null {
  if (p.state !== 'uncertain' || p.lostAt === null) return null;
  const settleMs = settleAfter(ownMs, p.settleMs);
  const wait = p.lostAt + settleMs - now;
  return wait > Math.min(settleMs, maxMs) ? null : { ms: Math.max(0, wait), lostAt: p.lostAt };
}
