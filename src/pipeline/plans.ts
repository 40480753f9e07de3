/**
 * The service's plans (spec 2.6) and which one a run's credits fit into. A per-credit rate alone
 * misleads finance: a plan is a monthly fee that includes credits, and only usage beyond them is
 * billed at the plan's rate (spec 8.6). Pure: credits in, a decision out.
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

export type PlanFit =
  /** The smallest plan whose included credits cover the run. */
  | { kind: 'included'; plan: PlanTerms }
  /** No plan includes that many: the cheapest month, fee plus overage at the plan's rate. */
  | { kind: 'overage'; plan: PlanTerms; overageCredits: number; monthlyTotal: number };

/** What a month holding this run costs on `plan`; null when the plan cannot hold it at all. */
export function monthlyCost(plan: PlanTerms, credits: number): number | null {
  const over = Math.max(0, credits - plan.includedCredits);
  if (over === 0) return plan.monthlyFee;
  if (plan.overageRate === null) return null;
  // Cents, so that 0.042 * n does not print as $x.xx000001.
  return Math.round((plan.monthlyFee + over * plan.overageRate) * 100) / 100;
}

export function planFit(credits: number, plans: readonly PlanTerms[] = PLANS): PlanFit {
  const fits = plans.find((p) => credits <= p.includedCredits);
  if (fits !== undefined) return { kind: 'included', plan: fits };
  let best: Extract<PlanFit, { kind: 'overage' }> | undefined;
  for (const plan of plans) {
    const total = monthlyCost(plan, credits);
    if (total === null || (best !== undefined && best.monthlyTotal <= total)) continue;
    best = { kind: 'overage', plan, overageCredits: credits - plan.includedCredits, monthlyTotal: total };
  }
  if (best === undefined) throw new Error('no plan can hold the run: the plan table has no overage rate');
  return best;
}
