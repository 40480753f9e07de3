import { planFit, PLANS, type PlanTerms } from '../pipeline/plans.js';
import { num } from './format.js';

const dollars = (n: number): string => `$${Number.isInteger(n) ? num(n) : n.toFixed(2)}`;
const FREE = PLANS[0] as PlanTerms;

/**
 * One line for finance: the plan a run fits into, beside the marginal cost at each rate, e.g.
 * "fits in Starter's 2,000 included credits ($99/month; more than the Free plan's 100)".
 * Assumes the month's included credits are otherwise unused, and says so only by "included".
 */
export function describePlanFit(credits: number): string {
  const fit = planFit(credits);
  const p = fit.plan;
  if (fit.kind === 'included' && p.monthlyFee === 0) return `fits in the ${p.name} plan's ${num(p.includedCredits)} credits ($0)`;
  const beyondFree = credits > FREE.includedCredits ? `; more than the ${FREE.name} plan's ${num(FREE.includedCredits)}` : '';
  if (fit.kind === 'included') return `fits in ${p.name}'s ${num(p.includedCredits)} included credits (${dollars(p.monthlyFee)}/month${beyondFree})`;
  return `more than any plan includes: cheapest is ${p.name}, ${dollars(p.monthlyFee)}/month + ${num(fit.overageCredits)} credits at $${String(p.overageRate)} = ${dollars(fit.monthlyTotal)} (or Enterprise)`;
}
