import { PLANS, type PlanTerms } from '../pipeline/pricing.js';
import type { MonthJson, Summary } from '../pipeline/summary.js';
import { count, num } from './format.js';

const usd = (n: number): string => `$${n.toFixed(2)}`;
export const dollars = (n: number): string => `$${Number.isInteger(n) ? num(n) : n.toFixed(2)}`;
const LARGEST = PLANS.reduce((a, b) => (b.includedCredits > a.includedCredits ? b : a)) as PlanTerms;

/** The month's cheapest plan in words ("Starter, $99 + 500 credits over at $0.05"); past the largest plan Enterprise is named, never priced (custom). */
export function describeCheapest(m: MonthJson): string {
  const plan = PLANS.find((p) => p.name === m.cheapest_plan) as PlanTerms;
  const enterprise = m.enterprise_worth_asking ? `; past ${LARGEST.name}'s ${num(LARGEST.includedCredits)} included credits, ask about Enterprise (custom, annual)` : '';
  if (m.overage_credits === 0) return `${plan.name}, ${num(m.credits)} of its ${num(plan.includedCredits)} included credits${enterprise}`;
  return `${plan.name}, ${dollars(plan.monthlyFee)} + ${num(m.overage_credits)} credits over at $${String(plan.overageRate)}${enterprise}`;
}

/** The month's credits possibly charged, said after what was (the dry run's words and the real run's). */
export const unconfirmedMonth = (m: MonthJson): string => (m.unconfirmed_credits > 0 ? `, and up to ${num(m.unconfirmed_credits)} unconfirmed` : '');

/** The dry run's money rows: first what this run adds to the month's bill on the cheapest plan, then how the month adds up, marginal prices labelled so, and what the store cannot see. */
export function moneyRows(s: Summary): [string, string][] {
  const rows: [string, string][] = [];
  const m = s.month;
  if (m !== null) {
    rows.push(['adds to bill', `${dollars(m.adds_usd)}   to this month's bill on its cheapest plan (${dollars(m.bill_before_usd)} -> ${dollars(m.bill_usd)})`]);
    const earlier = m.earlier_credits > 0 ? `${num(m.earlier_credits)} spent earlier by this service's runs + ${num(m.run_credits)} this run` : 'none spent earlier by this service\'s runs';
    rows.push(['this month', `${num(m.credits)}   credits since ${m.since.slice(0, 10)} UTC (${earlier}${unconfirmedMonth(m)})`]);
    rows.push(["month's bill", `${dollars(m.bill_usd)}   on ${describeCheapest(m)}`]);
  }
  // Per-plan overage figures no plan would bill for this run: only where the month cannot be priced (they stay in the JSON).
  const c = s.estimated_cost_usd;
  if (m === null) rows.push(["at plan rates", `${usd(c.starter)}   Starter · ${usd(c.growth)} Growth · ${usd(c.scale)} Scale: ${count(s.estimated_credits, 'credit')} at each plan's overage rate, not a bill`]);
  if (m !== null) rows.push(['not counted', m.not_counted]);
  return rows;
}
