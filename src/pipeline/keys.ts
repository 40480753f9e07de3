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
 *   an earlier one did and this error does not prove otherwise). Every retry, and every resume,
 *   must reuse the key until the service replays or completes it.
 * - null: a 429 comes from the rate limiter in front of the service and proves nothing; the key
 *   simply stays, and nothing is worth journaling.
 */
export type KeyVerdict = 'retired' | 'replayed' | 'kept' | null;

export function keyVerdict(company: Pick<Company, 'keyUncertain' | 'errorIds'>, error: unknown): KeyVerdict {
  if (error instanceof RateLimitedError) return null;
  if (!(error instanceof ApiError) || !error.definitive) return 'kept';
  if (error.requestId !== undefined && company.errorIds.has(error.requestId)) return 'replayed';
  return company.keyUncertain ? 'kept' : 'retired';
}
