import type { Stop } from './execute.js';
import type { RowStatus } from './results.js';
import type { RunState } from './state.js';

/** Per-credit rates of the plans in spec 2.6; a credit's worth never changes across plans (8.5). */
export const PLAN_RATES = { starter: 0.05, growth: 0.042, scale: 0.033 } as const;
export type Plan = keyof typeof PLAN_RATES;

export interface Summary {
  status: 'done' | 'dry_run' | 'partial' | 'stopped' | 'interrupted';
  dry_run: boolean;
  rows: number;
  invalid_rows: number;
  unique_domains: number;
  /** Canonical companies the service matched (several domains may share one). */
  companies: number;
  matched: number;
  no_match: number;
  errors: number;
  skipped: number;
  credits_charged: number;
  credits_charged_total: number;
  credits_remaining: number | null;
  /** Credits still to spend to finish: a dry run's exact estimate, or what a stopped run needs. */
  estimated_credits: number;
  estimated_cost_usd: Record<Plan, number>;
  stopped: Stop['reason'] | null;
  journal: string;
  output: string | null;
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
  journal: string;
  output: string | null;
}): Summary {
  const { state, tally, stop } = input;
  let owed = 0;
  for (const c of state.companies) if (state.needsEnrich(c)) owed++;
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
    credits_charged: state.creditsThisSession,
    credits_charged_total: state.creditsTotal,
    credits_remaining: state.creditsRemaining,
    estimated_credits: owed,
    estimated_cost_usd: costAt(owed),
    stopped: stop?.reason ?? null,
    journal: input.journal,
    output: input.output,
  };
}
