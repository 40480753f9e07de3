import type { HeldCompany, Lookup, Purchase } from '../store/types.js';

/** A miss is believed this long by default, then asked again (free): the service grows. */
export const DEFAULT_MISS_MAX_AGE_MS = 30 * 86_400_000;

/** The user's freshness policy, and the moment it is judged at. */
export interface Policy {
  now: number;
  /** Records bought longer ago than this are bought again; null: never (the default). */
  maxAgeMs: number | null;
  /** A miss is asked again (free) once older than this: the service grows. */
  missMaxAgeMs: number;
}

/** What to do about one input domain, given what the store knows of it. */
export type DomainPlan = { action: 'match' } | { action: 'hit'; company: string; name: string } | { action: 'miss' };

/** What to do about one matched company, given what the store holds and its latest purchase. */
export type CompanyPlan =
  | { action: 'reuse'; held: HeldCompany }
  /** `held`: an older record to show beside the error (a refresh whose answer was unusable). */
  | { action: 'no_match'; code: string | null; held: HeldCompany | null }
  | {
      action: 'buy';
      generation: number;
      /** A refresh of a held record the policy calls stale (the dry run prices these apart). */
      refresh: boolean;
      /** The held record, if any: shown if the refresh fails. */
      held: HeldCompany | null;
      /** An unfinished purchase to resume, exactly where its key stands. */
      resume: Purchase | null;
    };

/** The code of a paid answer that could not be used (api/errors.ts UnusablePaidAnswerError). */
export const UNUSABLE = 'bad_response';

export function planDomain(lookup: Lookup | undefined, policy: Policy): DomainPlan {
  if (lookup === undefined) return { action: 'match' };
  if (lookup.status === 'hit' && lookup.company !== null) return { action: 'hit', company: lookup.company, name: lookup.name ?? lookup.company };
  return policy.now - lookup.checkedAt > policy.missMaxAgeMs ? { action: 'match' } : { action: 'miss' };
}

/** The moment from which a held record is fresh (null: any, no --max-age). A claim refuses a company held fresh by it, whatever the plan believed. */
export function freshSince(policy: Pick<Policy, 'now' | 'maxAgeMs'>): number | null {
  return policy.maxAgeMs === null ? null : policy.now - policy.maxAgeMs;
}

const isStale = (held: HeldCompany, policy: Policy): boolean => {
  const since = freshSince(policy);
  return since !== null && held.boughtAt < since;
};

/** Reuse what is held and fresh; resume an unfinished purchase under its own key (only it recovers a possible charge free); buy the rest as a new generation. */
export function planCompany(held: HeldCompany | null, purchase: Purchase | null, policy: Policy): CompanyPlan {
  const open = purchase !== null && purchase.outcome === 'open' ? purchase : null;
  const refresh = held !== null;
  // Money may be at risk under an open intent: finish it under its own key, whatever the policy.
  if (open !== null && (open.intentKey !== null || open.uncertain)) return { action: 'buy', generation: open.generation, refresh, held, resume: open };
  if (held !== null && !isStale(held, policy)) return { action: 'reuse', held };
  // An unusable paid answer cost a credit and would likely come again: held back as long as a miss is believed (the row shows any older record).
  if (purchase !== null && purchase.outcome === 'failed' && purchase.errorCode === UNUSABLE && (held === null || purchase.generation > held.generation)) {
    if (policy.now - (purchase.closedAt ?? 0) <= policy.missMaxAgeMs) return { action: 'no_match', code: UNUSABLE, held };
  }
  // Nothing was sent under this open purchase's key: continuing it is a clean start.
  if (open !== null) return { action: 'buy', generation: open.generation, refresh, held, resume: open };
  // A miss is believed like a lookup's; any other failure (a 422) cost nothing, and the next run asks again.
  if (held === null && purchase !== null && purchase.outcome === 'miss' && policy.now - (purchase.closedAt ?? 0) <= policy.missMaxAgeMs) {
    return { action: 'no_match', code: null, held: null };
  }
  const last = Math.max(held?.generation ?? 0, purchase?.generation ?? 0);
  return { action: 'buy', generation: last + 1, refresh, held, resume: null };
}
