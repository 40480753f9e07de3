import { UNUSABLE } from './plan.js';
import type { Stop } from './stops.js';
import type { RowStatus } from './results.js';
import type { RunState } from './state.js';

/** Per-credit rates of the plans in spec 2.6; a credit's worth never changes across plans (8.5). */
export const PLAN_RATES = { starter: 0.05, growth: 0.042, scale: 0.033 } as const;
export type Plan = keyof typeof PLAN_RATES;

/**
 * The totals (README "Summary"), one vocabulary everywhere: rows are counted by their status
 * (`matched`, `no_match`, ...); companies by what happened to them (`bought`, `reused`).
 */
export interface Summary {
  status: 'done' | 'dry_run' | 'partial' | 'stopped' | 'interrupted';
  dry_run: boolean;
  rows: number;
  invalid_rows: number;
  unique_domains: number;
  /** Canonical companies the service matched (several domains may share one). */
  companies: number;
  /** Rows by status. */
  matched: number;
  no_match: number;
  errors: number;
  skipped: number;
  /** Companies bought by this invocation, and served from the store instead of bought. */
  bought: number;
  reused: number;
  /** Credits the store saved: one per company reused rather than bought (spec 8.4). */
  credits_saved: number;
  credits_charged: number;
  /**
   * Credits that may have been charged without an answer seen, beyond credits_charged: keys this
   * invocation retired on the settle rule (README "A company never gets stuck"), a credit each
   * at most. Zero unless the service lost an answer and then answered its key with an error.
   */
  credits_unconfirmed: number;
  credits_remaining: number | null;
  /** Companies still waiting on a paid call whose answer was lost (at most a credit each). */
  at_risk: number;
  /**
   * Companies whose paid answer could not be used (bad_response: another company's record, or
   * one that contradicts itself), this run or held from an earlier one: their credit was spent,
   * and they are not bought again before --miss-max-age.
   */
  unusable: number;
  /** Domains the free match could not answer: while any remain, the estimate is a lower bound. */
  unanswered_domains: number;
  /** Companies still to buy to finish (a dry run's estimate), and how many refresh a stale record. */
  estimated_credits: number;
  stale: number;
  estimated_cost_usd: Record<Plan, number>;
  stopped: Stop['reason'] | null;
  store: string;
  output: string | null;
  /** Wall time of this invocation, from start to the summary. */
  elapsed_ms: number;
}

export type RowTally = Record<RowStatus, number>;
export const emptyTally = (): RowTally => ({ matched: 0, no_match: 0, invalid: 0, error: 0, skipped: 0 });

export function costAt(credits: number): Record<Plan, number> {
  const round = (n: number): number => Math.round(n * 100) / 100;
  return { starter: round(credits * PLAN_RATES.starter), growth: round(credits * PLAN_RATES.growth), scale: round(credits * PLAN_RATES.scale) };
}

export function summarise(input: {
  state: RunState;
  tally: RowTally;
  rows: number;
  dryRun: boolean;
  stop: Stop | null;
  store: string;
  output: string | null;
  elapsedMs: number;
}): Summary {
  const { state, tally, stop } = input;
  const owed = state.owed();
  let bought = 0;
  let reused = 0;
  for (const c of state.companies) {
    if (c.status !== 'hit') continue;
    if (c.source === 'bought') bought++;
    else reused++;
  }
  const status: Summary['status'] =
    stop?.reason === 'interrupted' ? 'interrupted' : stop !== null ? 'stopped' : input.dryRun ? 'dry_run' : tally.error > 0 ? 'partial' : 'done';
  return {
    status,
    dry_run: input.dryRun,
    rows: input.rows,
    invalid_rows: tally.invalid,
    unique_domains: state.domainCount,
    companies: state.companies.length,
    matched: tally.matched,
    no_match: tally.no_match,
    errors: tally.error,
    skipped: tally.skipped,
    bought,
    reused,
    credits_saved: reused,
    credits_charged: state.creditsThisSession,
    credits_unconfirmed: state.unconfirmedThisSession,
    credits_remaining: state.creditsRemaining,
    unanswered_domains: state.unansweredDomains(),
    at_risk: state.atRisk(),
    unusable: state.companies.filter((c) => c.status === 'error' && c.errorCode === UNUSABLE).length,
    estimated_credits: owed.buy,
    stale: owed.refresh,
    estimated_cost_usd: costAt(owed.buy),
    stopped: stop?.reason ?? null,
    store: input.store,
    output: input.output,
    elapsed_ms: Math.round(input.elapsedMs),
  };
}
