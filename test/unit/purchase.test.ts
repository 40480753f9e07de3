import { describe, expect, it } from 'vitest';
import { applyOutcome, applyRelease, applyUnclaim, decideClaim, stateOf, type ClaimDecision, type KeptPurchase } from '../../src/store/purchase.js';
import type { EnrichEvent, HeldCompany, IntentEvent } from '../../src/store/types.js';
import { openPurchase } from '../helpers/records.js';

/** The purchase rules as a state machine: each row is (state, event) -> (claim, next state). */
const NOW = 1_000_000;
const ME = 7;
const OTHER = 9;
const kept = (over: Partial<KeptPurchase> = {}): KeptPurchase => ({ ...openPurchase(), ownerRun: null, credits: 0, run: null, openedAt: NOW - 10, person: null, reserved: 0, resumed: false, ...over });
const held = (over: Partial<HeldCompany> = {}): HeldCompany => ({ domain: 'acme.com', name: 'Acme', boughtAt: NOW - 100, lastUpdated: null, generation: 1, credits: 1, ...over });
const intent = (over: Partial<IntentEvent> = {}): IntentEvent => ({ type: 'intent', company: 'acme.com', generation: 1, keyVersion: 1, key: 'k1', at: NOW, freshSince: null, ...over });
const claim = (k: KeptPurchase | null, e: IntentEvent, h: HeldCompany | null = null, alive = true): ClaimDecision => decideClaim({ held: h, kept: k, event: e, run: ME, now: NOW, alive: () => alive, person: null, room: null });
const outcome = (k: KeptPurchase | null, over: Partial<EnrichEvent>): KeptPurchase | null => applyOutcome(k, { type: 'enrich', company: 'acme.com', generation: 1, keyVersion: 1, status: 'error', at: NOW, ...over }, ME, NOW);

describe('the purchase state machine', () => {
  it('names each state', () => {
    expect([kept(), kept({ intentKey: 'k1' }), kept({ intentKey: 'k1', uncertain: true }), kept({ outcome: 'hit' }), kept({ outcome: 'miss' }), kept({ outcome: 'failed' })].map(stateOf)).toStrictEqual([
      'unclaimed',
      'claimed',
      'uncertain',
      'bought',
      'missed',
      'failed',
    ]);
  });

  describe('an intent', () => {
    const cases: [string, KeptPurchase | null, IntentEvent, HeldCompany | null, boolean, string, Partial<KeptPurchase> | null][] = [
      ['nothing there: claimed, the request may go', null, intent(), null, true, 'ok', { intentKey: 'k1', ownerRun: ME, lostAt: NOW, openedAt: NOW }],
      ['unclaimed: claimed', kept(), intent(), null, true, 'ok', { intentKey: 'k1', ownerRun: ME }],
      ['held at this generation: held, nothing written', null, intent(), held(), true, 'held', null],
      ['held fresh (no --max-age), a later generation asked: held', null, intent({ generation: 2 }), held(), true, 'held', null],
      ['held stale by --max-age: the refresh is claimed', null, intent({ generation: 2, freshSince: NOW }), held(), true, 'ok', { generation: 2 }],
      ['held fresh, but the open purchase may have been charged: finished under its key', kept({ generation: 2, intentKey: 'k1' }), intent({ generation: 2 }), held(), false, 'tookOver', { ownerRun: ME }],
      ['claimed by a live run: busy', kept({ intentKey: 'k1', ownerRun: OTHER }), intent(), null, true, 'busy', null],
      ['claimed by a dead run: taken over under its key', kept({ intentKey: 'k1', ownerRun: OTHER, lostAt: NOW - 50 }), intent(), null, false, 'tookOver', { ownerRun: ME, lostAt: NOW }],
      ['its key retired since the plan: moved', kept({ keyVersion: 2 }), intent(), null, true, 'moved', null],
      ['closed since the plan: moved', kept({ outcome: 'miss' }), intent(), null, true, 'moved', null],
      ['open under another key text: moved', kept({ intentKey: 'other' }), intent(), null, false, 'moved', null],
    ];
    it.each(cases)('%s', (_what, before, event, h, alive, expected, after) => {
      const d = claim(before, event, h, alive);
      const kind = 'busy' in d ? 'busy' : d.claim.kind === 'ok' && d.claim.tookOver === true ? 'tookOver' : d.claim.kind;
      expect(kind).toBe(expected);
      const write = 'busy' in d ? null : d.write;
      if (after === null) expect(write).toBeNull();
      else expect(write).toMatchObject({ outcome: 'open', ...after });
    });
  });

  describe('an intent under a monthly budget', () => {
    const budgeted = (k: KeptPurchase | null, left: number, e: IntentEvent = intent()): ClaimDecision =>
      decideClaim({ held: null, kept: k, event: e, run: ME, now: NOW, alive: () => false, person: 'ana', room: { person: null, cap: 10, left } });
    it('reserves its price where it fits, naming who reserved it', () => {
      expect(budgeted(null, 1)).toMatchObject({ claim: { kind: 'ok' }, reserved: 1, write: { person: 'ana', reserved: 1 } });
      expect(budgeted(null, 3, intent({ price: 3 }))).toMatchObject({ reserved: 3, write: { reserved: 3 } });
    });
    it('is turned away, nothing written, where it does not', () => {
      expect(budgeted(null, 0)).toStrictEqual({ claim: { kind: 'capped', person: null, cap: 10 }, write: null });
      expect(budgeted(kept(), 2, intent({ price: 3 }))).toMatchObject({ claim: { kind: 'capped' }, write: null });
    });
    it('needs no room for a purchase an attempt may have gone under: its reservation stands', () => {
      for (const k of [kept({ intentKey: 'k1', ownerRun: OTHER, person: 'bo', reserved: 1 }), kept({ intentKey: 'k1', uncertain: true, person: 'bo', reserved: 1 })]) {
        expect(budgeted(k, 0)).toMatchObject({ claim: { kind: 'ok' }, reserved: 0, write: { person: 'bo', reserved: 1 } });
      }
    });
  });

  describe('an answer', () => {
    const claimed = kept({ intentKey: 'k1', ownerRun: ME, lostAt: NOW - 5 });
    const cases: [string, KeptPurchase | null, Partial<EnrichEvent>, Partial<KeptPurchase> | null][] = [
      ['a hit closes it, with its credit', claimed, { status: 'hit', charged: 1 }, { outcome: 'hit', intentKey: null, ownerRun: null, credits: 1, closedAt: NOW, run: ME }],
      ['a miss closes it, free', claimed, { status: 'miss', charged: 0 }, { outcome: 'miss', credits: 0 }],
      ['a final error fails it, keeping any charge', claimed, { code: 'bad_response', final: true, charged: 1 }, { outcome: 'failed', errorCode: 'bad_response', credits: 1 }],
      ['an error proving the key uncharged retires it', claimed, { code: 'internal', verdict: 'retired' }, { keyVersion: 2, intentKey: null, uncertain: false, lostAt: null, unconfirmed: 0 }],
      ['retired on the settle rule: counted as possibly charged', claimed, { code: 'internal', verdict: 'retired', unconfirmed: true }, { keyVersion: 2, unconfirmed: 1 }],
      ['a stale retire (another run holds it now) changes nothing', kept({ intentKey: 'k1', ownerRun: OTHER }), { code: 'internal', verdict: 'retired' }, null],
      ['a lost answer keeps the key, uncertain, from now', claimed, { code: 'network_error', verdict: 'kept', lost: true }, { uncertain: true, lostAt: NOW, keyVersion: 1, intentKey: 'k1' }],
      ['an error that proves nothing keeps the key and the loss time', kept({ intentKey: 'k1', ownerRun: ME, uncertain: true, lostAt: NOW - 5 }), { code: 'internal', verdict: 'kept' }, { uncertain: true, lostAt: NOW - 5 }],
      ['no purchase there (a live run always writes its intent first): nothing', null, { status: 'hit', charged: 1 }, null],
    ];
    it.each(cases)('%s', (_what, before, event, after) => {
      const next = outcome(before, event);
      if (after === null) expect(next).toBeNull();
      else expect(next).toMatchObject(after);
    });

    it('an imported journal opens the purchase it names', () => {
      expect(applyOutcome(null, { type: 'enrich', company: 'acme.com', generation: 1, keyVersion: 3, status: 'hit', charged: 1, at: 5 }, null, NOW)).toMatchObject({ outcome: 'hit', keyVersion: 3, credits: 1, openedAt: 5, closedAt: 5 });
    });
  });

  describe('letting go', () => {
    it('a release frees only this run\'s own open claim', () => {
      expect(applyRelease(kept({ intentKey: 'k1', ownerRun: ME }), { type: 'release', company: 'acme.com', generation: 1 }, ME)).toMatchObject({ ownerRun: null, intentKey: 'k1' });
      expect(applyRelease(kept({ intentKey: 'k1', ownerRun: OTHER }), { type: 'release', company: 'acme.com', generation: 1 }, ME)).toBeNull();
    });
    it('an unclaim gives back an intent nothing was sent under, not an uncertain or foreign one', () => {
      const e = { type: 'unclaim', company: 'acme.com', generation: 1, keyVersion: 1, key: 'k1' } as const;
      expect(applyUnclaim(kept({ intentKey: 'k1', ownerRun: ME, lostAt: NOW }), e, ME)).toMatchObject({ intentKey: null, ownerRun: null, lostAt: null });
      expect(applyUnclaim(kept({ intentKey: 'k1', ownerRun: ME, uncertain: true }), e, ME)).toBeNull();
      expect(applyUnclaim(kept({ intentKey: 'k1', ownerRun: OTHER }), e, ME)).toBeNull();
    });
  });
});
