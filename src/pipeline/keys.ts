import { ApiError, RateLimitedError } from '../api/errors.js';
import type { Company } from './state.js';

/**
 * What a failed paid attempt proves about the Idempotency-Key it was sent under:
 *
 * - "retired": no attempt under this key can have been charged, so the next attempt must take a
 *   new key (a service that stored this error under the key would otherwise replay it forever).
 *   True when every attempt under the key got an error answer (errors never charge, spec 7), or
 *   when this answer is a replay: the same requestId as an earlier answer under the key, so it is
 *   the key's stored outcome.
 * - "kept": an attempt under this key may have been charged unseen (this one lost its answer, or
 *   an earlier one did and this error does not prove otherwise). Every retry, and every resume,
 *   must reuse the key until the service replays or completes it.
 * - null: a 429 comes from the rate limiter in front of the service and proves nothing; the key
 *   simply stays, and nothing is worth journaling.
 */
export function keyVerdict(company: Pick<Company, 'keyUncertain' | 'errorIds'>, error: unknown): 'retired' | 'kept' | null {
  if (error instanceof RateLimitedError) return null;
  if (!(error instanceof ApiError) || !error.definitive) return 'kept';
  if (!company.keyUncertain) return 'retired';
  return error.requestId !== undefined && company.errorIds.has(error.requestId) ? 'retired' : 'kept';
}
