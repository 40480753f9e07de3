import { describe, expect, it } from 'vitest';
import { chargeMayBeUnseen, FIRST_PURCHASE, isOpen, keyOf, nextPaidStep, onClaim, onEnrich, onPlan, onRelease, onUnclaim, placeSpent, rowStatus, settleWait, type CallStand, type KnownPurchase, type RunPurchase, type TimedIntent } from '../../src/pipeline/run-purchase.js';
import type { CompanyPlan } from '../../src/pipeline/plan.js';
import type { Claim, EnrichEvent, HeldCompany } from '../../src/store/types.js';
import { openPurchase } from '../helpers/records.js';

/** A company's purchase as this run knows it, as a state machine: each row is (state, event) -> next state. */
const NOW = 1_000_000;
const unclaimed: RunPurchase = { state: 'unclaimed', error: null };
const claimed: RunPurchase = { state: 'claimed', key: 'k1', error: null };
const released: RunPurchase = { state: 'released', key: 'k1', error: 'network_error' };
const uncertain: RunPurchase = { state: 'uncertain', key: 'k1', lostAt: NOW - 50, settleMs: null, error: 'network_error' };
const failed: RunPurchase = { state: 'failed', error: 'bad_response', mayBeCharged: false };
const known = (purchase: RunPurchase, over: Partial<KnownPurchase> = {}): KnownPurchase => ({ ...FIRST_PURCHASE, purchase, ...over });
const held: HeldCompany = { domain: 'acme.com', name: 'Acme', boughtAt: NOW - 100, lastUpdated: null, generation: 1, credits: 1 };
const intent = (over: Partial<TimedIntent> = {}): TimedIntent => ({ type: 'intent', company: 'acme.com', generation: 1, keyVersion: 1, key: 'k1', at: NOW, freshSince: null, ...over });
const enrich = (over: Partial<EnrichEvent>): EnrichEvent => ({ type: 'enrich', company: 'acme.com', generation: 1, keyVersion: 1, status: 'error', at: NOW, ...over });
/** The state after a move: what it changed over what it left. */
const after = (before: KnownPurchase, move: Partial<KnownPurchase>): KnownPurchase => ({ ...before, ...move });

describe('a purchase as the run knows it', () => {
  it('names each state, and what the row, the key and the money read from it', () => {
    const states: RunPurchase[] = [unclaimed, claimed, released, uncertain, { state: 'bought' }, { state: 'reused' }, { state: 'missed' }, failed, { ...failed, mayBeCharged: true }];
    expect(states.map((p) => [p.state, rowStatus(p), isOpen(p), keyOf(p), chargeMayBeUnseen(p)])).toStrictEqual([
      ['unclaimed', 'pending', true, null, false],
      ['claimed', 'pending', true, 'k1', false],
      ['released', 'error', true, 'k1', false],
      ['uncertain', 'error', true, 'k1', true],
      ['bought', 'hit', false, null, false],
      ['reused', 'hit', false, null, false],
      ['missed', 'miss', false, null, false],
      ['failed', 'error', false, null, false],
      ['failed', 'error', false, null, true],
    ]);
  });

  describe('a plan', () => {
    const buy = (over: Partial<Extract<CompanyPlan, { action: 'buy' }>> = {}): CompanyPlan => ({ action: 'buy', generation: 1, refresh: false, held: null, resume: null, ...over });
    const cases: [string, CompanyPlan, Partial<KnownPurchase>][] = [
      ['held and fresh: reused, nothing to buy', { action: 'reuse', held: { ...held, generation: 3 } }, { purchase: { state: 'reused' }, boughtAt: NOW - 100, generation: 3 }],
      ['a miss believed: missed', { action: 'no_match', code: null, held: null }, { purchase: { state: 'missed' } }],
      ['an unusable answer held back: failed by an earlier run, the older record still shown', { action: 'no_match', code: 'bad_response', held }, { purchase: { ...failed, earlier: true }, boughtAt: NOW - 100 }],
      ['never bought: unclaimed, at its generation', buy({ generation: 2, refresh: true, held }), { purchase: unclaimed, generation: 2, refresh: true, boughtAt: NOW - 100 }],
      ['an open intent left by a run that stopped: uncertain, under the key it wrote', buy({ resume: openPurchase({ keyVersion: 3, intentKey: 'k3', lostAt: 5 }) }), { purchase: { state: 'uncertain', key: 'k3', lostAt: 5, settleMs: null, error: null }, keyVersion: 3 }],
      ['an open intent a run with a long --timeout left: uncertain, with that run\'s settle', buy({ resume: openPurchase({ intentKey: 'k1', lostAt: 5, settleMs: 600_000 }) }), { purchase: { state: 'uncertain', key: 'k1', lostAt: 5, settleMs: 600_000, error: null } }],
      ['an uncertain key a 0.1 journal left (no intent): uncertain, its key derived', buy({ resume: openPurchase({ uncertain: true }) }), { purchase: { state: 'uncertain', key: null, lostAt: null, settleMs: null, error: null } }],
      ['an open purchase nothing was sent under: unclaimed, at its key version', buy({ resume: openPurchase({ keyVersion: 2 }) }), { purchase: unclaimed, keyVersion: 2 }],
    ];
    it.each(cases)('%s', (_what, plan, expected) => {
      expect(after(FIRST_PURCHASE, onPlan(FIRST_PURCHASE, plan))).toStrictEqual({ ...FIRST_PURCHASE, ...expected });
    });
  });

  describe('a claim answered', () => {
    const cases: [string, KnownPurchase, TimedIntent, Claim, Partial<KnownPurchase>][] = [
      ['unclaimed, ok: claimed under the intent\'s key', known(unclaimed), intent({ keyVersion: 2, key: 'k2' }), { kind: 'ok' }, { purchase: { state: 'claimed', key: 'k2', error: null }, keyVersion: 2 }],
      ['released, ok: claimed again, its last error kept for the row', known(released), intent(), { kind: 'ok' }, { purchase: { state: 'claimed', key: 'k1', error: 'network_error' } }],
      ['uncertain, ok: still uncertain, its loss time kept', known(uncertain), intent(), { kind: 'ok' }, { purchase: uncertain }],
      ['unclaimed, took over another run\'s intent: uncertain from now', known(unclaimed), intent(), { kind: 'ok', tookOver: true }, { purchase: { state: 'uncertain', key: 'k1', lostAt: NOW, settleMs: null, error: null } }],
      ['uncertain, took over: the settle time counts from the takeover, not the earlier loss', known(uncertain), intent(), { kind: 'ok', tookOver: true }, { purchase: { ...uncertain, lostAt: NOW } }],
      // Read unclaimed at the plan, then sent under by a run with a 10-minute --timeout that died: its settle is the store's.
      ['unclaimed, took over a run whose settle was longer: uncertain, with that settle', known(unclaimed), intent(), { kind: 'ok', tookOver: true, settleMs: 600_000 }, { purchase: { state: 'uncertain', key: 'k1', lostAt: NOW, settleMs: 600_000, error: null } }],
      ['uncertain, ok: the longer settle the store holds now is kept', known({ ...uncertain, settleMs: 60_000 }), intent(), { kind: 'ok', settleMs: 600_000 }, { purchase: { ...uncertain, settleMs: 600_000 } }],
      ['held by a run that bought it since: reused', known(claimed), intent(), { kind: 'held', held: { ...held, generation: 2 } }, { purchase: { state: 'reused' }, boughtAt: NOW - 100, generation: 2 }],
      ['its key retired by another run: adopted where it stands', known(unclaimed), intent(), { kind: 'moved', purchase: openPurchase({ keyVersion: 2 }) }, { keyVersion: 2 }],
      ['closed as a miss by another run: missed', known(uncertain), intent(), { kind: 'moved', purchase: openPurchase({ outcome: 'miss' }) }, { purchase: { state: 'missed' } }],
      ['failed by another run while the key was uncertain here: failed, perhaps charged', known(uncertain), intent(), { kind: 'moved', purchase: openPurchase({ outcome: 'failed', errorCode: 'validation_error' }) }, { purchase: { state: 'failed', error: 'validation_error', mayBeCharged: true } }],
      ['busy (another live run holds it): nothing changes while this one waits', known(uncertain), intent(), { kind: 'busy' }, {}],
      ['closed: an intent changes nothing', known({ state: 'bought' }), intent(), { kind: 'ok' }, {}],
    ];
    it.each(cases)('%s', (_what, before, event, claim, expected) => {
      expect(after(before, onClaim(before, event, claim))).toStrictEqual({ ...before, ...expected });
    });
  });

  describe('an answer', () => {
    const cases: [string, KnownPurchase, Partial<EnrichEvent>, Partial<KnownPurchase>][] = [
      ['a hit: bought, when it came', known(claimed), { status: 'hit', charged: 1 }, { purchase: { state: 'bought' }, boughtAt: NOW }],
      ['a miss: missed, an older record still held', known(uncertain, { boughtAt: 5 }), { status: 'miss', charged: 0 }, { purchase: { state: 'missed' } }],
      ['an error proving the key uncharged: retired, the next attempt under a new key', known(claimed), { code: 'internal', verdict: 'retired' }, { purchase: { state: 'unclaimed', error: 'internal' }, keyVersion: 2 }],
      ['retired on the settle rule: counted as possibly charged', known(uncertain, { unconfirmed: 1 }), { code: 'internal', verdict: 'retired', unconfirmed: true }, { purchase: { state: 'unclaimed', error: 'internal' }, keyVersion: 2, unconfirmed: 2 }],
      ['a 422 under a key nothing can have charged: failed', known(claimed), { code: 'validation_error', verdict: 'retired', final: true }, { purchase: { state: 'failed', error: 'validation_error', mayBeCharged: false }, keyVersion: 2 }],
      ['an unusable paid answer: failed', known(claimed), { code: 'bad_response', charged: 1, final: true }, { purchase: failed }],
      ['an unusable paid answer under an uncertain key: failed, perhaps charged', known(uncertain), { code: 'bad_response', charged: 0, final: true }, { purchase: { ...failed, mayBeCharged: true } }],
      ['a lost answer: uncertain from then, the key kept', known(claimed), { code: 'network_error', verdict: 'kept', lost: true }, { purchase: { state: 'uncertain', key: 'k1', lostAt: NOW, settleMs: null, error: 'network_error' } }],
      ['a lost answer under a longer settle than the one recorded: the longer kept', known({ ...uncertain, settleMs: 60_000 }), { code: 'network_error', verdict: 'kept', lost: true, settleMs: 600_000 }, { purchase: { ...uncertain, lostAt: NOW, settleMs: 600_000 } }],
      ['a lost answer under a shorter settle than the one recorded: the longer kept', known({ ...uncertain, settleMs: 600_000 }), { code: 'network_error', verdict: 'kept', lost: true, settleMs: 60_000 }, { purchase: { ...uncertain, lostAt: NOW, settleMs: 600_000 } }],
      ['an error that proves nothing: still uncertain, its loss time kept', known(uncertain), { code: 'internal', verdict: 'kept' }, { purchase: { ...uncertain, error: 'internal' } }],
    ];
    it.each(cases)('%s', (_what, before, event, expected) => {
      expect(after(before, onEnrich(before, enrich(event), NOW + 1))).toStrictEqual({ ...before, ...expected });
    });

    it('a hit with no time of its own is bought now', () => {
      expect(onEnrich(known(claimed), { type: 'enrich', company: 'acme.com', generation: 1, keyVersion: 1, status: 'hit' }, NOW + 1)).toStrictEqual({ purchase: { state: 'bought' }, boughtAt: NOW + 1 });
    });
  });

  describe('letting go', () => {
    it('a release lets go of this run\'s own intent only: an uncertain key stays uncertain', () => {
      expect(onRelease(claimed)).toStrictEqual({ purchase: { state: 'released', key: 'k1', error: null } });
      expect([onRelease(uncertain), onRelease(unclaimed), onRelease({ state: 'bought' })]).toStrictEqual([{}, {}, {}]);
    });
    it('an unclaim gives back an intent nothing was sent under, never an uncertain one', () => {
      expect(onUnclaim(claimed)).toStrictEqual({ purchase: unclaimed });
      expect(onUnclaim({ ...claimed, error: 'internal' })).toStrictEqual({ purchase: { state: 'unclaimed', error: 'internal' } });
      expect([onUnclaim(uncertain), onUnclaim(failed)]).toStrictEqual([{}, {}]);
    });
  });
});

describe("a paid call's next step", () => {
  const stand = (over: Partial<CallStand> = {}): CallStand => ({ counted: 0, lapsed: false, claimedIn: 3, epoch: 3, claimedNow: false, ...over });
  it('pays a retired key first, renews a lapsed lease, claims unless this lease holds the claim, then sends', () => {
    const cases: [string, KnownPurchase, CallStand, ReturnType<typeof nextPaidStep>][] = [
      ['first attempt: no claim yet', known(unclaimed), stand({ claimedIn: null }), 'claim'],
      ['claimed in this lease', known(claimed), stand(), 'send'],
      ['claimed in an earlier lease', known(claimed), stand({ claimedIn: 2 }), 'claim'],
      ['lease lapsed: renew before anything is claimed', known(claimed), stand({ lapsed: true }), 'renew'],
      ['a key retired on the settle rule since the place was counted', known(unclaimed, { unconfirmed: 1 }), stand({ lapsed: true }), 'place'],
      ['uncertain: claimed again to date its send', known(uncertain), stand(), 'claim'],
      ['uncertain, claimed for this attempt', known(uncertain), stand({ claimedNow: true }), 'send'],
      ['claimed for this attempt, but a lapse since moved the epoch', known(uncertain), stand({ claimedNow: true, epoch: 4 }), 'claim'],
      ['retired key: a new intent', known(unclaimed, { keyVersion: 2 }), stand(), 'claim'],
    ];
    expect(cases.map(([name, k, s]) => [name, nextPaidStep(k, s)])).toStrictEqual(cases.map(([name, , , step]) => [name, step]));
  });

  it("spends a place's charge, at least one under a key perhaps charged, and each key retired since it was counted", () => {
    expect(placeSpent(known({ state: 'bought' }), 2, 0)).toBe(2);
    expect(placeSpent(known({ state: 'missed' }), 0, 0)).toBe(0);
    expect(placeSpent(known(uncertain), 0, 0)).toBe(1);
    expect(placeSpent(known({ ...failed, mayBeCharged: true }), 0, 0)).toBe(1);
    expect(placeSpent(known({ state: 'bought' }, { unconfirmed: 3 }), 1, 1)).toBe(3);
  });

  it("waits out a lost key's settle only when it is due within it and the limit", () => {
    const lost = (lostAt: number, settleMs: number | null = null): RunPurchase => ({ ...uncertain, lostAt, settleMs } as RunPurchase);
    expect(settleWait(lost(NOW - 50_000), NOW, 60_000, 120_000)).toStrictEqual({ ms: 10_000, lostAt: NOW - 50_000 });
    expect(settleWait(lost(NOW - 70_000), NOW, 60_000, 120_000)).toStrictEqual({ ms: 0, lostAt: NOW - 70_000 });
    expect(settleWait(lost(NOW, 300_000), NOW, 60_000, 120_000)).toBeNull();
    expect(settleWait(lost(NOW - 200_000, 300_000), NOW, 60_000, 120_000)).toStrictEqual({ ms: 100_000, lostAt: NOW - 200_000 });
    expect(settleWait({ ...uncertain, lostAt: null } as RunPurchase, NOW, 60_000, 120_000)).toBeNull();
    expect(settleWait(claimed, NOW, 60_000, 120_000)).toBeNull();
  });
});
