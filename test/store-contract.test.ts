import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { CompanyRecord } from '../src/api/types.js';
import { Store } from '../src/store/sqlite/store.js';
import type { ServiceStore, StoreEvent } from '../src/store/types.js';
import { tempDir } from './helpers/cli.js';
import { MemoryStore } from './helpers/memory-store.js';
import { companyRecord } from './helpers/records.js';

/**
 * The store contract (src/store/types.ts ServiceStore), one suite every backend runs: what a
 * run reads, what its claims answer when other runs hold, bought or moved a purchase, and what
 * it leaves for the next. Runs are played by several runs of one store (for SQLite, separate
 * connections to one file, as separate processes would have); test/store-lock, races and
 * resume play the cross-process cases with real child processes.
 */
interface Backend {
  /** A new run on the shared store, against one service (default 'svc'). */
  run(service?: string): ServiceStore;
  /** As a kill -9 of that run's process. */
  kill(run: ServiceStore): void;
  close(): void;
}

const info = { inputName: 'in.csv', inputSha256: 'x', rows: 1, dryRun: false, options: {} };
let dir: ReturnType<typeof tempDir>;
beforeEach(() => {
  dir = tempDir();
});
afterEach(() => dir.cleanup());

const backends: [string, () => Backend][] = [
  [
    'sqlite',
    () => {
      const stores: Store[] = [];
      const path = join(dir.path, 'store.db');
      return {
        run: (service = 'svc') => {
          const store = Store.open(path, { tool: 'contract' });
          stores.push(store);
          return store.beginRun(service, info);
        },
        kill: (run) => void stores[0]?.db.prepare("UPDATE runs SET status = 'interrupted' WHERE id = ?").run(run.runId),
        close: () => stores.forEach((s) => s.close()),
      };
    },
  ],
  [
    'memory',
    () => {
      const store = new MemoryStore();
      return { run: (service = 'svc') => store.beginRun(service), kill: (run) => store.kill(run.runId), close: () => {} };
    },
  ],
];

const record = (domain: string): CompanyRecord => companyRecord(domain);
const intent = (c: string, over: Partial<Extract<StoreEvent, { type: 'intent' }>> = {}): StoreEvent => ({ type: 'intent', company: c, generation: 1, keyVersion: 1, key: `${c}#1`, freshSince: null, ...over });
const hit = (c: string, g = 1): StoreEvent => ({ type: 'enrich', company: c, generation: g, keyVersion: 1, status: 'hit', charged: 1, record: record(c), keyUsed: `${c}#${g}` });

describe.each(backends)('the store contract: %s', (_name, make) => {
  let b: Backend;
  beforeEach(() => {
    b = make();
  });
  afterEach(() => b.close());

  async function write(run: ServiceStore, ...events: StoreEvent[]) {
    const claims = [];
    for (const e of events) claims.push(await run.append(e, e.type === 'intent'));
    await run.flush();
    return claims;
  }

  it('keeps lookups, records and purchases, read back in batches as one moment', async () => {
    const a = b.run();
    expect(await a.holdsAny()).toBe(false);
    await write(a, { type: 'match', domain: 'www.acme.com', status: 'hit', company: 'acme.com', name: 'Acme' }, { type: 'match', domain: 'nope.com', status: 'miss' }, intent('acme.com'), hit('acme.com'));
    const lookups: [number, string][] = [];
    await a.loadLookups(['www.acme.com', 'nope.com', 'other.com'], (d) => ['www.acme.com', 'nope.com', 'other.com'].indexOf(d), (i, l) => lookups.push([i, l.status]));
    expect(lookups.sort()).toStrictEqual([
      [0, 'hit'],
      [1, 'miss'],
    ]);
    const states: string[] = [];
    await a.loadCompanies(['acme.com', 'other.com'], (d, s) => states.push(`${d}:${s.held?.generation}:${s.purchase?.outcome}`));
    expect(states).toStrictEqual(['acme.com:1:hit']);
    expect([...(await a.records(['acme.com', 'other.com'])).keys()]).toStrictEqual(['acme.com']);
    expect(await a.holdsAny()).toBe(true);
  });

  it('answers busy while another live run holds the claim, and takes a dead run\'s claim over under its own key', async () => {
    const a = b.run();
    const c = b.run();
    expect(await write(a, intent('acme.com'))).toStrictEqual([{ kind: 'ok' }]);
    expect((await write(c, intent('acme.com')))[0]?.kind).toBe('busy');
    b.kill(a);
    expect(await write(c, intent('acme.com'))).toStrictEqual([{ kind: 'ok', tookOver: true }]);
  });

  it('answers held once another run bought the company, whatever generation the plan chose', async () => {
    const a = b.run();
    await write(a, intent('acme.com'), hit('acme.com'));
    const c = b.run();
    expect((await write(c, intent('acme.com')))[0]).toMatchObject({ kind: 'held', held: { generation: 1 } });
    expect((await write(c, intent('acme.com', { generation: 2, key: 'acme.com#g2' })))[0]).toMatchObject({ kind: 'held' });
  });

  it('answers moved once another run retired the key, and the new version claims', async () => {
    const a = b.run();
    await write(a, intent('acme.com'), { type: 'enrich', company: 'acme.com', generation: 1, keyVersion: 1, status: 'error', code: 'internal', verdict: 'retired' });
    b.kill(a);
    const c = b.run();
    expect((await write(c, intent('acme.com')))[0]).toMatchObject({ kind: 'moved', purchase: { keyVersion: 2, intentKey: null } });
    expect(await write(c, intent('acme.com', { keyVersion: 2, key: 'acme.com#2' }))).toStrictEqual([{ kind: 'ok' }]);
  });

  it('keeps a lost key uncertain for the next run, and counts a key retired on the settle rule', async () => {
    const a = b.run();
    await write(a, intent('acme.com'), { type: 'enrich', company: 'acme.com', generation: 1, keyVersion: 1, status: 'error', code: 'network_error', verdict: 'kept', lost: true, at: 5 });
    expect((await a.companyState('acme.com')).purchase).toMatchObject({ uncertain: true, lostAt: 5, intentKey: 'acme.com#1' });
    await write(a, { type: 'enrich', company: 'acme.com', generation: 1, keyVersion: 1, status: 'error', code: 'internal', verdict: 'retired', unconfirmed: true });
    expect((await a.companyState('acme.com')).purchase).toMatchObject({ uncertain: false, keyVersion: 2, unconfirmed: 1 });
  });

  it('gives back an intent nothing was sent under: the next run claims it clean', async () => {
    const a = b.run();
    await write(a, intent('acme.com'), { type: 'unclaim', company: 'acme.com', generation: 1, keyVersion: 1, key: 'acme.com#1' });
    expect(await write(b.run(), intent('acme.com'))).toStrictEqual([{ kind: 'ok' }]);
  });

  it('keeps services apart: what one service bought is nothing to another', async () => {
    const a = b.run('svc');
    await write(a, { type: 'match', domain: 'acme.com', status: 'hit', company: 'acme.com', name: 'Acme' }, intent('acme.com'), hit('acme.com'));
    const other = b.run('other-service');
    expect(await other.holdsAny()).toBe(false);
    expect((await other.companyState('acme.com')).held).toBeNull();
    expect(await write(other, intent('acme.com'))).toStrictEqual([{ kind: 'ok' }]);
  });

  it('lets go of its claims when it ends, for other runs to take over at once', async () => {
    const a = b.run();
    await write(a, intent('acme.com'));
    await a.releaseClaims();
    expect(await write(b.run(), intent('acme.com'))).toStrictEqual([{ kind: 'ok', tookOver: true }]);
  });
});
