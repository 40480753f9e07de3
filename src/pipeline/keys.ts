import { ApiError, RateLimitedError } from '../api/errors.js';
import type { Company } from './state.js';

/**
 * What a failed paid attempt proves about the Idempotency-Key it was sent under:
 *
 * - "retired": no attempt under this key can have been charged, so the next attempt must take a
 *   new key (a service that stored this error under the key would otherwise replay it forever):
 *   every attempt under the key got the service's own error answer (errors never charge, spec 7).
 * - "replayed": retired too, because this answer is a replay (the same requestId as an earlier
 *   answer under the key), so it is the key's stored outcome, an error. It describes the past: it
 *   must not stop the run (a replayed 402 says nothing of today's balance), and the next attempt,
 *   under a new key, may go at once.
 * - "kept": an attempt under this key may have been charged unseen (this one lost its answer, or
 *   an earlier one did and this error does not prove otherwise, because that attempt may still be
 *   running at the service). Every retry, and every resume, reuses the key until the service
 *   replays or completes it, or answers with an error once the lost attempt must have settled.
 * - null: a 429 comes from the rate limiter in front of the service and proves nothing; the key
 *   simply stays, and nothing is worth recording.
 */
export type KeyVerdict = 'retired' | 'replayed' | 'kept' | null;

export function keyVerdict(company: Pick<Company, 'keyUncertain' | 'errorIds' | 'lostAt'>, error: unknown, settle: Settle = NEVER): KeyVerdict {
  if (error instanceof RateLimitedError) return null;
  if (!(error instanceof ApiError) || !error.definitive) return 'kept';
  if (error.requestId !== undefined && company.errorIds.has(error.requestId)) return 'replayed';
  if (!company.keyUncertain) return 'retired';
  return settled(company, settle) ? 'retired' : 'kept';
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
}
const NEVER: Settle = { now: 0, afterMs: Number.POSITIVE_INFINITY };

export function settled(company: Pick<Company, 'lostAt'>, settle: Settle): boolean {
  return company.lostAt !== null && settle.now - company.lostAt >= settle.afterMs;
}
