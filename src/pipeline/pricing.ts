import { monthOf } from '../store/budget.js';
/**
 * The service's plans (spec 2.6) and what a month of credits costs on them: a plan's fee includes credits and overage is billed at its
 * rate with no penalty (spec 8.6), so a small plan plus overage often beats the next plan up. Pure.
 */
export interface PlanTerms {
  name: string;
  /** Dollars a month. */
  monthlyFee: number;
  includedCredits: number;
  /** Dollars per credit beyond the included ones; null where the plan has no overage (Free). */
  overageRate: number | null;
}

export const PLANS: readonly PlanTerms[] = [
  { name: 'Free', monthlyFee: 0, includedCredits: 100, overageRate: null },
  { name: 'Starter', monthlyFee: 99, includedCredits: 2_000, overageRate: 0.05 },
  { name: 'Growth', monthlyFee: 499, includedCredits: 12_000, overageRate: 0.042 },
  { name: 'Scale', monthlyFee: 1_999, includedCredits: 60_000, overageRate: 0.033 },
];

/** The plans with an overage rate, as the summary's JSON names them. */
export type OveragePlan = 'starter' | 'growth' | 'scale';

/** `credits` at each plan's overage rate (a marginal price, not a bill: docs/money.md). */
export function costAt(credits: number): Record<OveragePlan, number> {
  const at = (name: string): number => cents(credits * (PLANS.find((p) => p.name === name)?.overageRate ?? 0));
  return { starter: at('Starter'), growth: at('Growth'), scale: at('Scale') };
}

/** The cheapest way to pay for a month's credits. */
export interface MonthPrice {
  plan: PlanTerms;
  credits: number;
  overageCredits: number;
  /** Fee plus overage, in dollars (rounded to the cent). */
  total: number;
  /** Past the largest plan's credits, Enterprise (no published price, spec 2.6) is named as worth asking about, never priced. */
  enterpriseWorthAsking: boolean;
}

const cents = (n: number): number => Math.round(n * 100) / 100;

/** What a month holding `credits` costs on `plan`; null when the plan cannot hold it (Free past 100). */
export function monthlyCost(plan: PlanTerms, credits: number): number | null {
  const over = Math.max(0, credits - plan.includedCredits);
  if (over === 0) return plan.monthlyFee;
  if (plan.overageRate === null) return null;
  // Cents, so that 0.042 * n does not print as $x.xx000001.
  return cents(plan.monthlyFee + over * plan.overageRate);
}

/** The minimum over plans of fee + overage; a tie names the smaller plan (at 10,000 credits Starter with overage and Growth both cost $499). */
export function cheapestMonth(credits: number, plans: readonly PlanTerms[] = PLANS): MonthPrice {
  let best: MonthPrice | undefined;
  for (const plan of plans) {
    const total = monthlyCost(plan, credits);
    if (total === null || (best !== undefined && best.total <= total)) continue;
    best = { plan, credits, overageCredits: Math.max(0, credits - plan.includedCredits), total, enterpriseWorthAsking: false };
  }
  if (best === undefined) throw new Error('no plan can hold the month: the plan table has no overage rate');
  const largest = Math.max(...plans.map((p) => p.includedCredits));
  return { ...best, enterpriseWorthAsking: credits > largest };
}

/** A month's credits: what this service's runs spent before, and what this run adds. */
export interface MonthBill {
  /** The start of the calendar month (UTC), ms since the epoch. */
  since: number;
  earlierCredits: number;
  runCredits: number;
  before: MonthPrice;
  after: MonthPrice;
  /** What this run adds to the month's bill on the cheapest plan (after minus before). */
  addsUsd: number;
}

/** Midnight UTC on the first of `now`'s month: plans bill by calendar month. */
export const monthStart = (now: number): number => monthOf(now).since;

export function monthBill(earlierCredits: number, runCredits: number, since: number, plans: readonly PlanTerms[] = PLANS): MonthBill {
  const before = cheapestMonth(earlierCredits, plans);
  const after = cheapestMonth(earlierCredits + runCredits, plans);
  return { since, earlierCredits, runCredits, before, after, addsUsd: cents(after.total - before.total) };
}
