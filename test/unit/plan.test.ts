import { describe, expect, it } from 'vitest';
import { planCompany, planDomain, type Policy } from '../../src/pipeline/plan.js';
import type { HeldCompany, Purchase } from '../../src/store/types.js';
import { openPurchase } from '../helpers/records.js';

const DAY = 86_400_000;
const NOW = 1_800_000_000_000;
const policy = (over: Partial<Policy> = {}): Policy => ({ now: NOW, maxAgeMs: null, missMaxAgeMs: 30 * DAY, ...over });
const held = (ageDays: number, generation = 1): HeldCompany => ({ domain: 'acme.com', name: 'Acme', boughtAt: NOW - ageDays * DAY, lastUpdated: null, generation, credits: 1 });
const purchase = (over: Partial<Purchase>): Purchase => openPurchase(over);

describe('planDomain', () => {
  it.each([
    ['never looked up', undefined, policy(), 'match'],
    ['a hit is reused however old', { status: 'hit', company: 'acme.com', name: 'Acme', checkedAt: NOW - 900 * DAY } as const, policy(), 'hit'],
    ['a recent miss is believed', { status: 'miss', company: null, name: null, checkedAt: NOW - 29 * DAY } as const, policy(), 'miss'],
    ['an old miss is asked again', { status: 'miss', company: null, name: null, checkedAt: NOW - 31 * DAY } as const, policy(), 'match'],
  ])('%s', (_, lookup, p, action) => {
    expect(planDomain(lookup, p).action).toBe(action);
  });
});

describe('planCompany', () => {
  it('buys generation 1 of a company never bought', () => {
    expect(planCompany(null, null, policy())).toStrictEqual({ action: 'buy', generation: 1, refresh: false, held: null, resume: null });
  });

  it('reuses a held record with no policy, however old', () => {
    expect(planCompany(held(400), purchase({ outcome: 'hit' }), policy()).action).toBe('reuse');
  });

  it('buys a stale record again as the next generation, and reuses a fresh one', () => {
    expect(planCompany(held(31, 2), purchase({ generation: 2, outcome: 'hit' }), policy({ maxAgeMs: 30 * DAY }))).toMatchObject({ action: 'buy', generation: 3, refresh: true });
    expect(planCompany(held(29, 2), purchase({ generation: 2, outcome: 'hit' }), policy({ maxAgeMs: 30 * DAY })).action).toBe('reuse');
  });

  it('finishes an open purchase under its key when money may be at risk, fresh record or not', () => {
    const open = purchase({ generation: 2, intentKey: 'k-g2-v1' });
    expect(planCompany(held(1), open, policy())).toMatchObject({ action: 'buy', generation: 2, resume: open });
    const kept = purchase({ keyVersion: 3, uncertain: true });
    expect(planCompany(null, kept, policy())).toMatchObject({ action: 'buy', generation: 1, resume: kept });
  });

  it('drops an open purchase nothing was sent under when the held record will do', () => {
    expect(planCompany(held(1), purchase({ generation: 2 }), policy()).action).toBe('reuse');
  });

  it('believes a recent enrich miss or unusable paid answer, and asks again once it is old', () => {
    const miss = purchase({ outcome: 'miss', closedAt: NOW - 3 * DAY });
    expect(planCompany(null, miss, policy())).toStrictEqual({ action: 'no_match', code: null, held: null });
    const unusable = purchase({ outcome: 'failed', errorCode: 'bad_response', closedAt: NOW - DAY });
    expect(planCompany(null, unusable, policy())).toStrictEqual({ action: 'no_match', code: 'bad_response', held: null });
    expect(planCompany(null, { ...miss, closedAt: NOW - 40 * DAY }, policy())).toMatchObject({ action: 'buy', generation: 2 });
    expect(planCompany(null, { ...unusable, closedAt: NOW - 40 * DAY }, policy())).toMatchObject({ action: 'buy', generation: 2 });
  });

  // As long as a miss is believed.
  it('holds back a stale company whose refresh was unusable, showing its older record', () => {
    const held = { domain: 'acme.com', name: 'Acme', boughtAt: NOW - 90 * DAY, lastUpdated: null, generation: 1, credits: 1 };
    const refresh = purchase({ generation: 2, outcome: 'failed', errorCode: 'bad_response', closedAt: NOW - DAY });
    const stale = { ...policy(), maxAgeMs: 30 * DAY };
    expect(planCompany(held, refresh, stale)).toStrictEqual({ action: 'no_match', code: 'bad_response', held });
    expect(planCompany(held, { ...refresh, closedAt: NOW - 40 * DAY }, stale)).toMatchObject({ action: 'buy', generation: 3 });
  });

  it('asks again at once about a company whose enrich got a 422, which charged nothing', () => {
    expect(planCompany(null, purchase({ outcome: 'failed', errorCode: 'validation_error', closedAt: NOW - DAY }), policy())).toMatchObject({ action: 'buy', generation: 2 });
  });
});
