import { ApiError, IN_PROGRESS, RateLimitedError } from '../api/errors.js';
import type { Company } from './state.js';


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

export function keyVerdict(company: Pick<Company, 'purchase'>, error: unknown, settle: Settle = NEVER): KeyVerdict {
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
