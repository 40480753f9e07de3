import { describe, expect, it } from 'vitest';
import { copiedPurchase, noPurchases, purchaseMove, tally } from '../../src/store/copy.js';
import { keptPurchase } from '../helpers/records.js';

/**
 * Found by an adversarial review and fixed on `enrich ledger copy`'s rules (store/copy.ts). Each store
 * derives keys from its own store id, so one company's generation open in both stores is open
 * under two different keys. Each test failed before its fix.
 */
const kept = keptPurchase;

describe('ledger copy and a key that may have been charged', () => {
  it("never silently drops the laptop's possibly charged key when the team's purchase is open", () => {
    // The laptop was killed after sending under its key (charged, answer lost); the team tried the
    // same company, got a fresh 500 (key retired: v2, nothing sent under it).
    const laptop = kept({ outcome: 'open', closedAt: null, credits: 0, intentKey: 'enrich-LAPTOP-g1-v1', uncertain: true, lostAt: 950 });
    const team = kept({ outcome: 'open', closedAt: null, credits: 0, keyVersion: 2, intentKey: null, errorCode: 'internal' });
    const move = purchaseMove(laptop, team, false);
    const counts = noPurchases();
    tally(counts, move, laptop, team);
    // 'keep' drops the laptop's key (the only one the service would replay for free) and says
    // nothing: the team's next run buys under its own v2 key, a second charge, reported nowhere.
    expect(move === 'keep' && counts.unconfirmed === 0 && counts.open === 0 && counts.busy === 0 && counts.conflicts === 0).toBe(false);
  });

  it("closing the team's open purchase from the laptop's answer counts the team's lost key", () => {
    const laptop = kept({ credits: 1, closedAt: 1_000 });
    // A team run sent under the team's key and lost the answer (uncertain), then ended.
    const team = kept({ outcome: 'open', closedAt: null, credits: 0, intentKey: 'enrich-TEAM-g1-v1', uncertain: true, lostAt: 990 });
    expect(purchaseMove(laptop, team, false)).toBe('close');
    const counts = noPurchases();
    tally(counts, 'close', laptop, team);
    const written = copiedPurchase(laptop, team, new Map());
    // The row written has no key at risk and no unconfirmed credit, and the report says 1 credit:
    // the team key's possible charge disappears from the ledger (ledger show/spend) for good.
    expect(written.unconfirmed + counts.unconfirmed).toBeGreaterThanOrEqual(1);
  });

  // The target keeps its key; once the source settles its own, the next copy closes it.
  it('reports a purchase open in both under different keys as unsettled, not dropped', () => {
    const laptop = kept({ outcome: 'open', closedAt: null, credits: 0, intentKey: 'enrich-LAPTOP-g1-v1', uncertain: true, lostAt: 950 });
    const team = kept({ outcome: 'open', closedAt: null, credits: 0, intentKey: 'enrich-TEAM-g1-v1', uncertain: true, lostAt: 990 });
    const move = purchaseMove(laptop, team, false);
    const counts = noPurchases();
    tally(counts, move, laptop, team);
    // Before: 'keep', and nothing counted: the laptop's possible charge was in no report.
    expect(move).toBe('unsettled');
    expect(counts).toMatchObject({ unsettled: 1, open: 0, closed: 0, credits: 0 });
    // Once the laptop's run replayed its key (closed there), the next copy closes the team's over
    // it, counting the team's own key as possibly charged.
    const settled = kept({ credits: 1, closedAt: 1_000, intentKey: null });
    expect(purchaseMove(settled, team, false)).toBe('close');
    expect(copiedPurchase(settled, team, new Map()).unconfirmed).toBe(1);
  });
});
