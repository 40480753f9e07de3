import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { companyWins, copiedGeneration, copiedPurchase, copiedRun, lookupWins, purchaseMove, COPIED_RUNNING } from '../../src/store/copy.js';
import type { CopyRun } from '../../src/store/copy-types.js';
import { libsql } from '../../src/store/sqlite/libsql.js';
import { SqliteLedger } from '../../src/store/sqlite/ledger.js';
import { Store } from '../../src/store/sqlite/store.js';
import { SCHEMA_VERSION } from '../../src/store/sqlite/schema.js';
import { tempDir } from '../helpers/cli.js';
import { keptPurchase, runInfo } from '../helpers/records.js';

/** The copy's rules (store/copy.ts), and runs.user on the SQLite store (schema 3). */
const kept = keptPurchase;

describe("ledger copy's rules", () => {
  it('adds what the target lacks, leaves what matches, never adds credits closed differently', () => {
    expect(purchaseMove(kept(), null, false)).toBe('add');
    expect(purchaseMove(kept(), kept({ run: 3 }), false)).toBe('same');
    expect(purchaseMove(kept(), kept({ closedAt: 2_000 }), false)).toBe('conflict');
    // Closed in the source, open in the target: taken, unless a live run of the target holds it.
    const open = kept({ outcome: 'open', closedAt: null, credits: 0, intentKey: 'k', uncertain: true, ownerRun: 4 });
    expect(purchaseMove(kept(), open, false)).toBe('close');
    expect(purchaseMove(kept(), open, true)).toBe('busy');
    // Nothing of a company a live run of the target is buying, whatever the generation; what is the same, said so.
    expect(purchaseMove(kept({ generation: 2 }), null, true)).toBe('busy');
    expect(purchaseMove(kept(), kept({ run: 3 }), true)).toBe('same');
    // Open in the source: the target's own state of the purchase is what its runs act on, unless
    // only the source's key may have been charged (then it is the one to resume under).
    expect(purchaseMove(open, kept(), false)).toBe('keep');
    expect(purchaseMove(open, kept({ outcome: 'open', closedAt: null, keyVersion: 2, intentKey: 'k2', uncertain: true }), false)).toBe('unsettled');
    expect(purchaseMove(open, kept({ outcome: 'open', closedAt: null, intentKey: 'k', uncertain: true }), false)).toBe('keep');
    expect(purchaseMove(open, kept({ outcome: 'open', closedAt: null, keyVersion: 2 }), false)).toBe('close');
  });

  it('keeps an open purchase\'s key and what is known of it, without its owner; maps its run', () => {
    const open = kept({ outcome: 'open', closedAt: null, credits: 0, intentKey: 'enrich-abc-g1-v3', keyVersion: 3, uncertain: true, unconfirmed: 1, lostAt: 950, ownerRun: 4, run: 7 });
    expect(copiedPurchase(open, null, new Map([[7, 70]]))).toStrictEqual({ ...open, ownerRun: null, run: 70 });
    expect(copiedPurchase(open, null, new Map()).run).toBeNull();
  });

  it('takes the newer record or lookup; a run copied while running never looks alive', () => {
    // Newer by when it was bought: each store counts its own generations (review: a laptop's second
    // purchase, older, replaced the team's first, newer, and a run then bought it a third time).
    expect(companyWins({ boughtAt: 1 }, { boughtAt: 9 }, false)).toBe(false);
    expect(companyWins({ boughtAt: 9 }, { boughtAt: 1 }, false)).toBe(true);
    expect(companyWins({ boughtAt: 5 }, { boughtAt: 5 }, false)).toBe(false);
    expect(companyWins({ boughtAt: 5 }, null, false)).toBe(true);
    // Never while a purchase of it is open there: its run's record comes.
    expect(companyWins({ boughtAt: 9 }, { boughtAt: 1 }, true)).toBe(false);
    expect(companyWins({ boughtAt: 9 }, null, true)).toBe(false);
    // Kept at no lower a generation than the target's own.
    expect(copiedGeneration({ generation: 1 }, { generation: 3 })).toBe(3);
    expect(copiedGeneration({ generation: 2 }, { generation: 1 })).toBe(2);
    expect(copiedGeneration({ generation: 2 }, null)).toBe(2);
    const lookup = { domain: 'a.com', status: 'hit' as const, company: 'a.com', name: 'A', checkedAt: 5 };
    expect(lookupWins(lookup, { ...lookup, checkedAt: 5 })).toBe(false);
    expect(lookupWins(lookup, { ...lookup, checkedAt: 4 })).toBe(true);
    const run = { status: 'running' } as CopyRun;
    expect(copiedRun(run).status).toBe(COPIED_RUNNING);
    expect(copiedRun({ ...run, status: 'done' }).status).toBe('done');
  });
});

describe('who ran it, on the SQLite store', () => {
  const dir = tempDir();

  it('opening a schema 2 store adds runs.user; runs record user and host; the ledger says who', async () => {
    const path = join(dir.path, 'old.db');
    Store.open(path, { tool: 'test' }).close();
    // As enrich wrote it before: no user column, schema 2.
    const raw = new (libsql())(path);
    raw.exec('ALTER TABLE runs DROP COLUMN user');
    raw.pragma('user_version = 2');
    raw.exec("INSERT INTO services (name) VALUES ('svc'); INSERT INTO runs (service, started_at, pid, host, tool, dry_run, status) VALUES (1, 1, 1, 'old-host', 'test', 0, 'done')");
    raw.close();
    const store = Store.open(path, { tool: 'test', host: 'laptop-a', user: 'ana' });
    expect(store.db.pragma('user_version', { simple: true })).toBe(SCHEMA_VERSION);
    const run = store.beginRun('svc', runInfo);
    await run.close();
    const ledger = new SqliteLedger(store);
    expect((await ledger.runs(10)).map((r) => [r.user, r.host])).toStrictEqual([
      ['ana', 'laptop-a'],
      [null, 'old-host'],
    ]);
    store.close();
    dir.cleanup();
  });
});
