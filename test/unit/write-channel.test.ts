import { chmodSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Store } from '../../src/store/sqlite/store.js';
import type { StoreEvent } from '../../src/store/types.js';
import { threadChannel, type WriteChannel } from '../../src/store/sqlite/write-channel.js';
import { tempDir } from '../helpers/cli.js';

/** The built writer thread (npm test builds first): the file the CLI's runs use. */
const THREAD = fileURLToPath(new URL('../../dist/store-writer.cjs', import.meta.url));

let dir: ReturnType<typeof tempDir>;
let closing: (Store | WriteChannel)[] = [];
beforeEach(() => {
  dir = tempDir();
});
afterEach(async () => {
  for (const c of closing.reverse()) await c.close();
  closing = [];
  dir.cleanup();
});

const info = { inputName: 'in.csv', inputSha256: 'x', rows: 1, dryRun: false, options: {} };
const intent = (c: string, key = `k-${c}`): { event: StoreEvent; durable: boolean } => ({ event: { type: 'intent', company: c, generation: 1, keyVersion: 1, key }, durable: true });

function setUp(): { store: Store; channel: WriteChannel; serviceId: number; run: number } {
  expect(existsSync(THREAD), `${THREAD} is missing: run npm run build`).toBe(true);
  const path = join(dir.path, 'store.db');
  const store = Store.open(path, { tool: 'test' });
  closing.push(store);
  const records = store.beginRun('svc', info);
  const serviceId = store.serviceId('svc');
  const channel = threadChannel(THREAD, { path, tool: 'test', serviceId, run: records.runId, storeId: records.storeId });
  closing.push(channel);
  return { store, channel, serviceId, run: records.runId };
}

describe("the store's writer thread", () => {
  it('commits each batch on its own connection before answering, claims in order', async () => {
    const { store, channel } = setUp();
    const now = Date.now();
    const claims = await channel.write([intent('a.com'), intent('b.com'), { event: { type: 'match', domain: 'x.com', status: 'miss' }, durable: false }], now);
    expect(claims).toEqual([{ kind: 'ok' }, { kind: 'ok' }, { kind: 'ok' }]);
    // Visible to the run's own connection at once: the answer means committed.
    const open = store.db.prepare("SELECT domain FROM purchases WHERE outcome = 'open' ORDER BY domain").raw(true).all();
    expect(open).toEqual([['a.com'], ['b.com']]);
    expect(store.db.prepare('SELECT status, checked_at FROM lookups').raw(true).all()).toEqual([['miss', now]]);
    // A second claim of a purchase under another key: moved on, as the inline writer says.
    const [again] = await channel.write([intent('a.com', 'other-key')], now);
    expect(again?.kind).toBe('moved');
  });

  it('turns a failed commit into an error for the batch, and keeps working after', async () => {
    const { channel } = setUp();
    // An enrich event for a company with no intent is fine; one with a bad generation type fails
    // SQLite's NOT NULL on purchases.generation inside the transaction, which rolls back whole.
    const bad = { event: { type: 'intent', company: 'c.com', generation: null, keyVersion: 1, key: 'k' } as unknown as StoreEvent, durable: true };
    await expect(channel.write([intent('d.com'), bad], Date.now())).rejects.toThrow();
    expect(await channel.write([intent('e.com')], Date.now())).toEqual([{ kind: 'ok' }]);
  });

  it('fails every batch once the store cannot be opened by the thread', async () => {
    const path = join(dir.path, 'locked', 'store.db');
    const store = Store.open(path, { tool: 'test' });
    closing.push(store);
    const records = store.beginRun('svc', info);
    chmodSync(join(dir.path, 'locked'), 0o500);
    try {
      // Root ignores permissions: stand in a path that cannot be a database instead.
      const target = process.getuid?.() === 0 ? join(dir.path, 'locked') : path;
      const channel = threadChannel(THREAD, { path: target, tool: 'test', serviceId: store.serviceId('svc'), run: records.runId, storeId: records.storeId });
      closing.push(channel);
      await expect(channel.write([intent('f.com')], Date.now())).rejects.toThrow(/store/);
    } finally {
      chmodSync(join(dir.path, 'locked'), 0o700);
    }
  });
});
