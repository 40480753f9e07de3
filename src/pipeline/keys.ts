import { ApiError, IN_PROGRESS, RateLimitedError } from '../api/errors.js';
import type { Company } from './state.js';


/** A paid call whose answer was lost is taken to have finished at the service after this. */
export const DEFAULT_SETTLE_MS = 60_000;

/**
 * What a failed paid attempt proves about the Idempotency-Key it was sent under (README "A
 * company never gets stuck"):
 *
 * - "retired": no attempt under this key can have been charged, so the next attempt takes a new
 *   key (a service that stored this error under the key would otherwise replay it forever): every
 *   attempt under the key got the service's own error answer, and errors never charge (spec 7.2).
 * - "settled": retired too, on the settle rule: an attempt under this key lost its answer, and the
 *   service answered the key with an error once that attempt must have finished. By the spec, a
 *   charged key would have replayed its stored record (4.2) and an error charges nothing (7.2), so
 *   the key was not charged; only a service whose idempotency layer fails could have charged it.
 *   The credit is therefore counted as possibly spent (`credits_unconfirmed`), never as saved, and
 *   the next attempt, under a new key, goes at once: the error may be a stored one replayed, and
 *   says nothing of today (a replayed 402 of today's balance, a replayed 500 of today's health).
 * - "kept": an attempt under this key may have been charged unseen (this one lost its answer, or
 *   an earlier one did and may still be running at the service). Every retry, and every resume,
 *   reuses the key until the service replays or completes it, or the settle rule applies.
 * - null: a 429 comes from the rate limiter in front of the service and proves nothing; the key
 *   simply stays, and nothing is worth recording.
 *
 * A `requestId` proves nothing here: the spec makes it optional (2.5) and never says it is unique,
 * and a service that sends a constant one made every fresh error look like a stored replay.
 */
export type KeyVerdict = 'retired' | 'settled' | 'kept' | null;

export function keyVerdict(company: Pick<Company, 'purchase'>, error: unknown, settle: Settle = NEVER): KeyVerdict {
  if (error instanceof RateLimitedError) return null;
  const p = company.purchase;
  // "Still running" under a key lost before: that attempt may yet be charged, whatever the settle time says.
  if (error instanceof ApiError && error.status === IN_PROGRESS && p.state === 'uncertain') return 'kept';
  if (!(error instanceof ApiError) || !error.definitive) return 'kept';
  if (p.state !== 'uncertain') return 'retired';
  return settled(p.lostAt, settle, p.settleMs) ? 'settled' : 'kept';
}

/**
 * When an attempt whose answer was lost must have finished at the service. Until then its fate is
 * open; after it, the service's own error under the same key proves the key was never charged,
 * whatever the service stores: one that stores results would have replayed the charged answer,
 * and one that stores every first outcome would replay that outcome, which was then an error.
 */
export interface Settle {
  now: number;
  /** How long a paid call may go on at the service after its answer was lost. */
  afterMs: number;
  /**
   * Whether the service answered a request of its own after `at` (pipeline/health.ts): an error
   * proves a key uncharged only from a service that was working after the key was lost, since
   * one failing in front of its idempotency layer (an outage) answers 500 to a charged key too.
   */
  answeredSince(at: number): boolean;
}
const NEVER: Settle = { now: 0, afterMs: Number.POSITIVE_INFINITY, answeredSince: () => false };

/**
 * `lostAt`: when an attempt under the key last went unanswered; null: not known. `recordedMs`: the
 * settle of the run that sent it (a longer --timeout there), which a shorter one here never cuts.
 */
export function settled(lostAt: number | null, settle: Settle, recordedMs: number | null = null): boolean {
  return lostAt !== null && settle.now - lostAt >= settleAfter(settle.afterMs, recordedMs) && settle.answeredSince(lostAt);
}

/** How long a lost attempt may still run: this run's settle, or the sending run's if longer. */
export const settleAfter = (ownMs: number, recordedMs: number | null): number => Math.max(ownMs, recordedMs ?? 0);
