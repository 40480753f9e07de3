import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { atRisk, watchSkewedRuns } from '../../src/store/sqlite/ledger.js';
import { LEASE_MS, type Store } from '../../src/store/sqlite/store.js';
import type { HeldCompany, Purchase } from '../../src/store/types.js';
import { RecordWriter } from '../../src/store/sqlite/writer.js';
import { hitEvent, runInfo } from '../helpers/records.js';
import { useStoreFiles } from '../helpers/store-files.js';

/** What two runs on one store can do to each other between a read and a write. */
const files = useStoreFiles();
const open = (path?: string): Store => files.open(path);
const info = runInfo;
const hit = hitEvent;

describe('the plan reads one moment of the store', () => {
  it('never sees a purchase another run closed without the company it bought', async () => {
    const path = join(files.dir.path, 'race.db');
    const buyer = open(path).beginRun('svc', info);
    const planner = open(path);
    const run = planner.beginRun('svc', info);
    // Something held, so the plan reads both tables.
    await buyer.append(hit('other.com'));
    await buyer.flush();
    // Run A buys acme.com exactly between the planner's read of companies and of purchases.
    const sql = planner.sql.bind(planner);
    let struck = false;
    planner.sql = (text: string) => {
      if (!struck && /FROM purchases WHERE service = \?/.test(text)) {
        struck = true;
        // Committed at once, on a connection of its own, before the planner reads on.
        const a = open(path);
        const claims = new RecordWriter(a, a.serviceId('svc'), null).write(
          [
            { event: { type: 'intent', company: 'acme.com', generation: 1, keyVersion: 1, key: 'k1' }, durable: true },
            { event: hit('acme.com'), durable: false },
          ],
          Date.now(),
        );
        expect(claims[0]).toStrictEqual({ kind: 'ok' });
      }
      return sql(text);
    };
    const seen: { held: HeldCompany | null; purchase: Purchase | null }[] = [];
    await run.loadCompanies(['acme.com', 'other.com'], (domain, state) => {
      if (domain === 'acme.com') seen.push(state);
    });
    expect(struck).toBe(true);
    // Either both or neither: a closed purchase without its company would plan generation 2.
    expect(seen.every((s) => (s.held === null) === (s.purchase === null))).toBe(true);
  });

  it('refuses a claim on a company held fresh, whatever generation the plan chose', async () => {
    const path = join(files.dir.path, 'held.db');
    const a = open(path).beginRun('svc', info);
    await a.append({ type: 'intent', company: 'acme.com', generation: 1, keyVersion: 1, key: 'k1' }, true);
    await a.append(hit('acme.com'));
    await a.flush();
    const b = open(path).beginRun('svc', info);
    // A plan that read the store mid-purchase asks for generation 2: without --max-age, any held record is fresh.
    expect(await b.append({ type: 'intent', company: 'acme.com', generation: 2, keyVersion: 1, key: 'k2', freshSince: null }, true)).toMatchObject({ kind: 'held', held: { generation: 1 } });
    // Under --max-age, a record bought after the cutoff is fresh too; one bought before it is stale and refreshed.
    expect(await b.append({ type: 'intent', company: 'acme.com', generation: 2, keyVersion: 1, key: 'k2', freshSince: Date.now() - 60_000 }, true)).toMatchObject({ kind: 'held' });
    expect(await b.append({ type: 'intent', company: 'acme.com', generation: 2, keyVersion: 1, key: 'k2', freshSince: Date.now() + 60_000 }, true)).toStrictEqual({ kind: 'ok' });
  });

  it('finishes a possibly charged purchase under its key, though the company is held', async () => {
    const path = join(files.dir.path, 'resume.db');
    const store = open(path);
    const a = store.beginRun('svc', info);
    await a.append(hit('acme.com'));
    // A --fresh run wrote the intent of generation 2 and died: its key may have been charged.
    await a.append({ type: 'intent', company: 'acme.com', generation: 2, keyVersion: 1, key: 'k2' }, true);
    await a.flush();
    store.db.prepare("UPDATE runs SET status = 'done'").run();
    const b = open(path).beginRun('svc', info);
    expect(await b.append({ type: 'intent', company: 'acme.com', generation: 2, keyVersion: 1, key: 'k2', freshSince: null }, true)).toStrictEqual({ kind: 'ok', tookOver: true });
  });
});

describe('leases never trust another host\'s clock', () => {
  const YEAR = 365 * 86_400_000;
  /** Store b's own steady clock, moved by the test: the lease is judged by it alone. */
  let steady = 0;
  const openAt = (path: string): Store => files.open(path, { monotonic: () => steady });
  async function skewedOwner(path: string): Promise<{ store: Store; runId: number }> {
    const store = open(path);
    const a = store.beginRun('svc', info);
    await a.append({ type: 'intent', company: 'acme.com', generation: 1, keyVersion: 1, key: 'k1' }, true);
    await a.flush();
    // A run on another host whose clock is a year ahead: its heartbeat reads as a year from now.
    store.db.prepare("UPDATE runs SET host = 'laptop-far-ahead', heartbeat_at = ? WHERE id = ?").run(Date.now() + YEAR, a.runId);
    return { store, runId: a.runId };
  }

  // Its claim is then taken over under its key.
  it("lapses a future heartbeat that never moves after a lease by this process's clock", async () => {
    const path = join(files.dir.path, 'skew.db');
    await skewedOwner(path);
    steady = 0;
    const b = openAt(path).beginRun('svc', info);
    const claim = () => b.append({ type: 'intent', company: 'acme.com', generation: 1, keyVersion: 1, key: 'k1' }, true);
    expect((await claim()).kind).toBe('busy');
    steady += LEASE_MS;
    expect((await claim()).kind).toBe('busy');
    steady += 1;
    expect(await claim()).toStrictEqual({ kind: 'ok', tookOver: true });
  });

  it('a run on another host that keeps beating stays alive however far ahead its clock is', async () => {
    const path = join(files.dir.path, 'beating.db');
    const { store, runId } = await skewedOwner(path);
    steady = 0;
    const b = openAt(path).beginRun('svc', info);
    const claim = () => b.append({ type: 'intent', company: 'acme.com', generation: 1, keyVersion: 1, key: 'k1' }, true);
    for (let beat = 1; beat <= 5; beat++) {
      expect((await claim()).kind).toBe('busy');
      steady += LEASE_MS - 1;
      store.db.prepare('UPDATE runs SET heartbeat_at = ? WHERE id = ?').run(Date.now() + YEAR + beat * 10_000, runId);
    }
    expect((await claim()).kind).toBe('busy');
  });

  it('ledger release watches such a run for a lease first, and never lists one that beats', async () => {
    const path = join(files.dir.path, 'release.db');
    const { store, runId } = await skewedOwner(path);
    steady = 0;
    const reader = openAt(path);
    const notes: number[] = [];
    // Nothing can be judged from the clock: the purchase is not listed before it is watched.
    expect(atRisk(reader, [])).toStrictEqual([]);
    await watchSkewedRuns(reader, async (ms) => void (steady += ms), (n) => notes.push(n));
    expect(notes).toStrictEqual([1]);
    expect(atRisk(reader, []).map((p) => p.domain)).toStrictEqual(['acme.com']);
    // One that beats while watched stays alive, and is not listed.
    const watcher = openAt(path);
    let beats = 0;
    await watchSkewedRuns(
      watcher,
      async (ms) => {
        steady += ms;
        store.db.prepare('UPDATE runs SET heartbeat_at = ? WHERE id = ?').run(Date.now() + YEAR + ++beats, runId);
      },
      () => {},
    );
    expect(beats).toBe(1);
    expect(atRisk(watcher, [])).toStrictEqual([]);
  });
});
