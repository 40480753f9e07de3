import { planFit, PLANS, type PlanTerms } from '../pipeline/plans.js';
import { count, num } from './format.js';

const dollars = (n: number): string => `$${Number.isInteger(n) ? num(n) : n.toFixed(2)}`;
const FREE = PLANS[0] as PlanTerms;

/**
 * One line for finance: the plan a run fits into, beside the marginal cost at each rate, e.g.
 * "138 credits fit in Starter's 2,000 included credits ($99/month; more than the Free plan's 100)".
 * It starts with the number so that it lines up with the summary's other figures. It assumes the
 * month's included credits are not used by anything else.
 */
export function describePlanFit(credits: number): string {
  if (credits === 0) return '0 credits: nothing to buy, on any plan';
  const fit = planFit(credits);
  const p = fit.plan;
  const n = count(credits, 'credit fits', 'credits fit');
  if (fit.kind === 'included' && p.monthlyFee === 0) return `${n} in the ${p.name} plan's ${num(p.includedCredits)} credits ($0)`;
  const beyondFree = `; more than the ${FREE.name} plan's ${num(FREE.includedCredits)}`;
  if (fit.kind === 'included') return `${n} in ${p.name}'s ${num(p.includedCredits)} included credits (${dollars(p.monthlyFee)}/month${beyondFree})`;
  return `${num(credits)} credits exceed every plan's included credits: cheapest is ${p.name}, ${dollars(p.monthlyFee)}/month + ${num(fit.overageCredits)} at $${String(p.overageRate)} = ${dollars(fit.monthlyTotal)} (or Enterprise)`;
}
