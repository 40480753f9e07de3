import { UNUSABLE } from './plan.js';
import type { Stop } from './stops.js';
import type { RowStatus } from './results.js';
import type { RunState } from './state.js';
import { cheapestMonth, costAt, monthBill, type MonthBill, type OveragePlan } from './pricing.js';
import type { MonthSpend } from '../store/types.js';
import type { BudgetLine } from '../store/budget.js';

/** The totals (docs/output.md `--summary-json`): rows counted by status (`matched`, `no_match`, ...), companies by what happened to them (`bought`, `reused`). */
export interface Summary {
  status: 'done' | 'dry_run' | 'partial' | 'stopped' | 'interrupted';
  dry_run: boolean;
  rows: number;
  invalid_rows: number;
  unique_domains: number;
  /** Canonical companies the service matched (several domains may share one). */
  companies: number;
  /** Rows by status (`found`: a dry run's rows whose company it would buy). */
  matched: number;
  found: number;
  no_match: number;
  errors: number;
  skipped: number;
  /** Companies bought by this invocation, and served from the store instead of bought. */
  bought: number;
  reused: number;
  /** Credits the store saved: reused companies this account would otherwise have paid for again (store/run-records.ts savedAmong). */
  credits_saved: number;
  credits_charged: number;
  /** Keys this invocation retired on the settle rule, each possibly charged unseen (a credit at most); zero unless the service lost an answer, then erred. */
  credits_unconfirmed: number;
  credits_remaining: number | null;
  /** Companies still waiting on a paid call whose answer was lost (at most a credit each). */
  at_risk: number;
  /** Companies whose paid answer was unusable (bad_response), this run or earlier: their credit is spent, and they are not bought again before --miss-max-age. */
  unusable: number;
  /** Domains the free match could not answer: while any remain, the estimate is a lower bound. */
  unanswered_domains: number;
  /** Companies still to buy to finish (a dry run's estimate), and how many refresh a stale record. */
  estimated_credits: number;
  stale: number;
  /** A dry run under --max-credits or a monthly budget: the companies the cap leaves for a later run (else 0). */
  left_by_cap: number;
  /** The monthly budgets that apply to this run (docs/budgets.md), as the store counts them when the summary is made; null: none. */
  budget: BudgetJson | null;
  /** estimated_credits at each plan's overage rate: a marginal price, not a bill. */
  estimated_cost_usd: Record<OveragePlan, number>;
  /** The calendar month (UTC) this run's credits fall in, priced on the cheapest plan; null if unknown. */
  month: MonthJson | null;
  stopped: Stop['reason'] | null;
  store: string;
  output: string | null;
  /** Wall time of this invocation, from start to the summary. */
  elapsed_ms: number;
}

/** The monthly caps of a run: the store's (the team's, on a team store) and its person's. */
export interface BudgetJson {
  /** The calendar month (UTC, by the store's clock), YYYY-MM. */
  month: string;
  /** Whose the store's cap is: one person's file, or a team's database. */
  store_kind: 'store' | 'team';
  caps: { person: string | null; cap: number; spent: number; held: number; left: number }[];
  /** A dry run's estimate was cut to what the tightest cap has left. */
  limits_estimate: boolean;
}

/** What the store cannot see, said wherever a month is priced. */
export const MONTH_NOT_COUNTED = 'credits spent by other tools on the same account, and credits rolled over from earlier months (spec 8.6)';

export interface MonthJson {
  /** Start of the calendar month, ISO 8601 UTC. */
  since: string;
  /** Credits this service's runs spent this month before this run, as the store recorded them. */
  earlier_credits: number;
  /** This run's credits: spent (a real run) or the estimate (a dry run). */
  run_credits: number;
  /** Charged this month, with this run (keys retired as possibly charged apart: unconfirmed_credits). */
  credits: number;
  /** Keys retired as possibly charged this month (answers lost, then only errors): at most this many more. */
  unconfirmed_credits: number;
  cheapest_plan: string;
  overage_credits: number;
  /** The month's bill on the cheapest plan, with this run, and without it. */
  bill_usd: number;
  bill_before_usd: number;
  /** What this run adds to this month's bill on the cheapest plan: the one answer. */
  adds_usd: number;
  /** The bill should every unconfirmed credit have been charged (bill_usd when there are none). */
  bill_max_usd: number;
  /** Past the largest plan's included credits: Enterprise (custom price) is worth asking about. */
  enterprise_worth_asking: boolean;
  not_counted: string;
}

export function monthJson(bill: MonthBill, unconfirmed = 0): MonthJson {
  return {
    since: new Date(bill.since).toISOString(),
    earlier_credits: bill.earlierCredits,
    run_credits: bill.runCredits,
    credits: bill.after.credits,
    unconfirmed_credits: unconfirmed,
    cheapest_plan: bill.after.plan.name,
    overage_credits: bill.after.overageCredits,
    bill_usd: bill.after.total,
    bill_before_usd: bill.before.total,
    adds_usd: bill.addsUsd,
    bill_max_usd: unconfirmed === 0 ? bill.after.total : cheapestMonth(bill.after.credits + unconfirmed).total,
    enterprise_worth_asking: bill.after.enterpriseWorthAsking,
    not_counted: MONTH_NOT_COUNTED,
  };
}

export type RowTally = Record<RowStatus, number>;
export const emptyTally = (): RowTally => ({ matched: 0, found: 0, no_match: 0, invalid: 0, error: 0, skipped: 0 });

export function summarise(input: {
  state: RunState;
  tally: RowTally;
  rows: number;
  dryRun: boolean;
  stop: Stop | null;
  store: string;
  output: string | null;
  elapsedMs: number;
  /** Reused companies this account would otherwise have paid for again (see credits_saved). */
  saved: number;
  maxCredits: number | null;
  /** The monthly caps that apply (read as the summary is made), and what the tightest left before this run (a dry run's cap). */
  budget: { month: string; team: boolean; lines: readonly BudgetLine[]; leftBefore: number | null } | null;
  /** Credits this service's runs spent this month before this run; null: the month is not priced. */
  month: { since: number; earlier: MonthSpend } | null;
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
  // A dry run under a cap estimates what the command would spend, as the real run would stop there.
  // Purchases that hold their reservation already are finished whatever room is left.
  const budgetLeft = input.budget?.leftBefore === null || input.budget === null ? null : Math.min(owed.buy, owed.reserved + input.budget.leftBefore);
  const cap = input.maxCredits === null ? budgetLeft : budgetLeft === null ? input.maxCredits : Math.min(input.maxCredits, budgetLeft);
  const estimated = input.dryRun && cap !== null ? Math.min(owed.buy, cap) : owed.buy;
  const budget: BudgetJson | null =
    input.budget === null || input.budget.lines.length === 0
      ? null
      : {
          month: input.budget.month,
          store_kind: input.budget.team ? 'team' : 'store',
          caps: input.budget.lines.map((l) => ({ person: l.person, cap: l.cap ?? 0, spent: l.spent, held: l.held, left: l.left ?? 0 })),
          limits_estimate: input.dryRun && budgetLeft !== null && budgetLeft < owed.buy && (input.maxCredits === null || budgetLeft < input.maxCredits),
        };
  // The month priced on what was charged; keys lost and retired (maybe charged) said apart, with the bill they could make.
  const runCredits = input.dryRun ? estimated : state.creditsThisSession;
  const unconfirmed = input.month === null ? 0 : input.month.earlier.unconfirmed + (input.dryRun ? 0 : state.unconfirmedThisSession);
  const month = input.month === null ? null : monthJson(monthBill(input.month.earlier.charged, runCredits, input.month.since), unconfirmed);
  const status: Summary['status'] =
    stop?.reason === 'interrupted' ? 'interrupted' : stop !== null ? 'stopped' : input.dryRun ? 'dry_run' : tally.error > 0 && !state.errorsAllEarlier() ? 'partial' : 'done';
  return {
    status,
    dry_run: input.dryRun,
    rows: input.rows,
    invalid_rows: tally.invalid,
    unique_domains: state.domainCount,
    companies: state.companies.length,
    matched: tally.matched,
    found: tally.found,
    no_match: tally.no_match,
    errors: tally.error,
    skipped: tally.skipped,
    bought,
    reused,
    credits_saved: input.saved,
    credits_charged: state.creditsThisSession,
    credits_unconfirmed: state.unconfirmedThisSession,
    credits_remaining: state.creditsRemaining,
    unanswered_domains: state.unansweredDomains(),
    at_risk: state.atRisk(),
    unusable: state.companies.filter((c) => c.status === 'error' && c.errorCode === UNUSABLE).length,
    estimated_credits: estimated,
    stale: owed.refresh,
    left_by_cap: owed.buy - estimated,
    budget,
    estimated_cost_usd: costAt(estimated),
    month,
    stopped: stop?.reason ?? null,
    store: input.store,
    output: input.output,
    elapsed_ms: Math.round(input.elapsedMs),
  };
}
