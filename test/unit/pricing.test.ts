import { describe, expect, it } from 'vitest';
import { cheapestMonth, monthBill, monthlyCost, monthStart, PLANS } from '../../src/pipeline/pricing.js';
import { monthJson } from '../../src/pipeline/summary.js';
import { describeCheapest } from '../../src/ui/pricing.js';

const plan = (name: string) => PLANS.find((p) => p.name === name)!;

// Spec 2.6: Free $0/100 (no overage), Starter $99/2,000 at $0.050, Growth $499/12,000 at $0.042,
// Scale $1,999/60,000 at $0.033; spec 8.6: overage at the plan's own rate, no penalty.
describe("a month's cheapest plan: min over plans of fee + max(0, credits - included) x rate", () => {
  it.each([
    [0, 'Free', 0, 0],
    [100, 'Free', 0, 0],
    [101, 'Starter', 0, 99],
    [2_000, 'Starter', 0, 99],
    [2_001, 'Starter', 1, 99.05],
    [2_500, 'Starter', 500, 124],
    // 99 + 8,000 x 0.05 = 499 = Growth's fee: a tie names the smaller plan.
    [10_000, 'Starter', 8_000, 499],
    [10_001, 'Growth', 0, 499],
    [12_001, 'Growth', 1, 499.04],
    [47_714, 'Growth', 35_714, 1_998.99],
    [47_715, 'Scale', 0, 1_999],
    [60_000, 'Scale', 0, 1_999],
    [70_000, 'Scale', 10_000, 2_329],
  ])('%i credits: %s, %i over, $%d', (credits, name, over, total) => {
    const m = cheapestMonth(credits);
    expect(m.plan.name).toBe(name);
    expect(m.overageCredits).toBe(over);
    expect(m.total).toBe(total);
    // Every plan that can hold the month costs at least as much.
    for (const p of PLANS) {
      const cost = monthlyCost(p, credits);
      if (cost !== null) expect(cost).toBeGreaterThanOrEqual(total);
    }
  });

  it('Free holds at most its 100 credits; Enterprise is named past the largest plan, not priced', () => {
    expect(monthlyCost(plan('Free'), 101)).toBeNull();
    expect(cheapestMonth(60_000).enterpriseWorthAsking).toBe(false);
    expect(cheapestMonth(60_001).enterpriseWorthAsking).toBe(true);
    expect(describeCheapest(monthJson(monthBill(0, 70_000, 0)))).toBe(
      "Scale, $1,999 + 10,000 credits over at $0.033; past Scale's 60,000 included credits, ask about Enterprise (custom, annual)",
    );
    expect(describeCheapest(monthJson(monthBill(0, 2_500, 0)))).toBe('Starter, $99 + 500 credits over at $0.05');
    expect(describeCheapest(monthJson(monthBill(0, 138, 0)))).toBe('Starter, 138 of its 2,000 included credits');
  });
});

describe('the month priced with what was spent earlier in it', () => {
  it.each([
    // earlier, this run -> plan before, after, what the run adds
    [0, 12, 'Free', 'Free', 0],
    [280, 12, 'Starter', 'Starter', 0],
    [90, 20, 'Free', 'Starter', 99],
    [1_990, 20, 'Starter', 'Starter', 0.5],
    [0, 2_001, 'Free', 'Starter', 99.05],
    [1_000, 11_000, 'Starter', 'Growth', 400],
    [60_000, 10_000, 'Scale', 'Scale', 330],
  ])('%i earlier + %i: %s -> %s, adds $%d', (earlier, run, before, after, adds) => {
    const bill = monthBill(earlier, run, 0);
    expect([bill.before.plan.name, bill.after.plan.name, bill.addsUsd]).toEqual([before, after, adds]);
    expect(bill.after.credits).toBe(earlier + run);
  });

  it('a month is the UTC calendar month', () => {
    expect(new Date(monthStart(Date.parse('2026-11-25T08:00:00Z'))).toISOString()).toBe('2026-11-01T00:00:00.000Z');
    expect(new Date(monthStart(Date.parse('2026-12-01T00:30:00+02:00'))).toISOString()).toBe('2026-11-01T00:00:00.000Z');
    const json = monthJson(monthBill(280, 12, Date.parse('2026-11-01T00:00:00Z')));
    expect(json).toMatchObject({ since: '2026-11-01T00:00:00.000Z', earlier_credits: 280, run_credits: 12, credits: 292, cheapest_plan: 'Starter', bill_usd: 99, adds_usd: 0 });
    expect(json.not_counted).toMatch(/other tools on the same account.*rolled over/);
  });
});
