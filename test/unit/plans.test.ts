import { describe, expect, it } from 'vitest';
import { monthlyCost, planFit, PLANS } from '../../src/pipeline/plans.js';
import { describePlanFit } from '../../src/ui/plans.js';

const plan = (name: string) => PLANS.find((p) => p.name === name)!;

describe('which plan a run fits into (spec 2.6, 8.5-8.6)', () => {
  it('picks the smallest plan whose included credits cover the run, the boundaries included', () => {
    expect(planFit(0)).toMatchObject({ kind: 'included', plan: { name: 'Free' } });
    expect(planFit(100)).toMatchObject({ kind: 'included', plan: { name: 'Free' } });
    expect(planFit(101)).toMatchObject({ kind: 'included', plan: { name: 'Starter' } });
    expect(planFit(2_000)).toMatchObject({ kind: 'included', plan: { name: 'Starter' } });
    expect(planFit(2_001)).toMatchObject({ kind: 'included', plan: { name: 'Growth' } });
    expect(planFit(60_000)).toMatchObject({ kind: 'included', plan: { name: 'Scale' } });
  });

  it('beyond every plan, the cheapest month of fee plus overage at that plan rate', () => {
    const fit = planFit(70_000);
    expect(fit).toEqual({ kind: 'overage', plan: plan('Scale'), overageCredits: 10_000, monthlyTotal: 1_999 + 330 });
    // Free has no overage: it cannot hold more than its 100 credits at any price.
    expect(monthlyCost(plan('Free'), 101)).toBeNull();
    expect(monthlyCost(plan('Starter'), 3_000)).toBe(149);
    expect(monthlyCost(plan('Growth'), 12_001)).toBe(499.04);
  });

  it('says it in one line, naming the Free plan as the yardstick', () => {
    expect(describePlanFit(0)).toBe('0 credits: nothing to buy, on any plan');
    expect(describePlanFit(1)).toBe("1 credit fits in the Free plan's 100 credits ($0)");
    expect(describePlanFit(42)).toBe("42 credits fit in the Free plan's 100 credits ($0)");
    expect(describePlanFit(138)).toBe("138 credits fit in Starter's 2,000 included credits ($99/month; more than the Free plan's 100)");
    expect(describePlanFit(5_000)).toBe("5,000 credits fit in Growth's 12,000 included credits ($499/month; more than the Free plan's 100)");
    expect(describePlanFit(70_000)).toBe("70,000 credits exceed every plan's included credits: cheapest is Scale, $1,999/month + 10,000 at $0.033 = $2,329 (or Enterprise)");
  });
});
