import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import type { ClaimRow } from '../../src/store/postgres/claim-sql.js';
import { BatchPlan, commitBatch } from '../../src/store/postgres/writer.js';
import type { StoreEvent } from '../../src/store/types.js';

const intent = (c: string): StoreEvent => ({ type: 'intent', company: c, generation: 1, keyVersion: 1, key: `k-${c}` });

/** A server that commits every batch and answers its claim statement with `rows`. */
function answering(rows: Partial<ClaimRow>[]): pg.Client {
  const query = async (q: string | { text: string }): Promise<{ command: string; rows: unknown[] }> => {
    const text = typeof q === 'string' ? q : q.text;
    if (text === 'COMMIT') return { command: 'COMMIT', rows: [] };
    return { command: 'SELECT', rows: text.includes('WITH input') ? rows : [] };
  };
  return { query } as unknown as pg.Client;
}

const ok = (ord: number, domain: string): Partial<ClaimRow> => ({ ord, domain, verdict: 'ok', written: true, took_over: false } as Partial<ClaimRow>);

describe("a batch's claims, read from the rows of its claim statement", () => {
  const plan = (): BatchPlan => new BatchPlan(1, 7, 'here', [intent('a.com'), intent('b.com'), intent('c.com')], 1_700_000_000_000, []);

  it('are read in order, one row an intent', async () => {
    const claims = await commitBatch(answering([ok(1, 'a.com'), ok(2, 'b.com'), ok(3, 'c.com')]), plan());
    expect(claims.map((c) => c.claim)).toStrictEqual([{ kind: 'ok' }, { kind: 'ok' }, { kind: 'ok' }]);
  });

  // An intent left unread would stand as claimed ('ok'), and a purchase another run holds be bought again.
  it.each([
    ['a row short', [ok(1, 'a.com'), ok(2, 'b.com')]],
    ['an ordinal twice', [ok(1, 'a.com'), ok(1, 'a.com'), ok(3, 'c.com')]],
    ['rows of other companies', [ok(1, 'a.com'), ok(2, 'c.com'), ok(3, 'b.com')]],
    ['none (another statement read)', []],
  ])('fail the batch on %s', async (_, rows) => {
    await expect(commitBatch(answering(rows), plan())).rejects.toThrow(/the store answered 3 claims of a committed batch/);
  });
});
