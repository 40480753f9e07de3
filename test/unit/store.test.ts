import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { CompanyRecord } from '../../src/api/types.js';
import { atRisk } from '../../src/store/sqlite/ledger.js';
import { libsql } from '../../src/store/sqlite/libsql.js';
import { enableWal, LEASE_MS, type Store } from '../../src/store/sqlite/store.js';
import type { Claim, StoreEvent } from '../../src/store/types.js';
import type { WriteChannel } from '../../src/store/sqlite/write-channel.js';
import { companyRecord, hitEvent, runInfo } from '../helpers/records.js';
import { useStoreFiles } from '../helpers/store-files.js';

const files = useStoreFiles();
const open = (path?: string): Store => files.open(path);
const info = runInfo;
const record = (domain: string): CompanyRecord => companyRecord(domain);
const hit = hitEvent;

describe('the SQLite store', () => {
  it('commits intents in groups: 200 intents at once cost a handful of syncs, not 200', async () => {
    const run = open().beginRun('svc', info);
    const claims = await Promise.all(Array.from({ length: 200 }, (_, i) => run.append({ type: 'intent', company: `c${i}.com`, generation: 1, keyVersion: 1, key: `k${i}` }, true)));
    expect(claims.every((c) => c.kind === 'ok')).toBe(true);
    expect(run.syncs).toBeGreaterThanOrEqual(1);
    expect(run.syncs).toBeLessThan(10);
  });

  describe('batching, its commits held back by the test (fake timers)', () => {
    beforeEach(() => {
      vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    });
    afterEach(() => {
      vi.useRealTimers();
    });

    /** A run whose commits the test releases: what queues meanwhile is what the next batch holds. */
    function heldRun(): { batches: string[][]; release: () => Promise<void>; run: ReturnType<Store['beginRun']> } {
      const batches: string[][] = [];
      const out: (() => void)[] = [];
      const channel: WriteChannel = {
        write: (batch) => {
          batches.push(batch.map((w) => (w.event.type === 'match' ? w.event.domain : w.event.company)));
          return new Promise<Claim[]>((resolve) => out.push(() => resolve(batch.map(() => ({ kind: 'ok' })))));
        },
        close: async () => {},
      };
      return {
        batches,
        release: async () => {
          (out.shift() as () => void)();
          await vi.advanceTimersByTimeAsync(0);
        },
        run: open().beginRun('svc', info, { kind: 'channel', open: () => channel }),
      };
    }
    const outcome = (c: string): StoreEvent => ({ type: 'enrich', company: c, generation: 1, keyVersion: 1, status: 'miss', charged: 0 });
    const lookup = (d: string): StoreEvent => ({ type: 'match', domain: d, status: 'miss' });

    it('gathers outcomes queued while a commit is out, and sends an intent among them at once', async () => {
      const { batches, release, run } = heldRun();
      void run.append(outcome('a.com'));
      await vi.advanceTimersByTimeAsync(20);
      expect(batches).toStrictEqual([['a.com']]);
      // Outcomes queued while that commit is out wait out their own gathering time after it...
      void run.append(outcome('b.com'));
      void run.append(outcome('c.com'));
      await release();
      await vi.advanceTimersByTimeAsync(19);
      expect(batches).toHaveLength(1);
      void run.append(outcome('d.com'));
      await vi.advanceTimersByTimeAsync(1);
      expect(batches).toStrictEqual([['a.com'], ['b.com', 'c.com', 'd.com']]);
      // ...but an intent queued meanwhile takes them along at once: a paid call waits on it.
      void run.append(outcome('e.com'));
      const claim = run.append({ type: 'intent', company: 'f.com', generation: 1, keyVersion: 1, key: 'k-f' }, true);
      await release();
      expect(batches[2]).toStrictEqual(['e.com', 'f.com']);
      await release();
      await expect(claim).resolves.toStrictEqual({ kind: 'ok' });
      // A flush waits for nothing to gather.
      void run.append(outcome('g.com'));
      const flushed = run.flush();
      await vi.advanceTimersByTimeAsync(0);
      expect(batches[3]).toStrictEqual(['g.com']);
      await release();
      await flushed;
      expect(batches).toHaveLength(4);
    });

    it('writes a lookup no later than the intent that follows it', async () => {
      const { batches, release, run } = heldRun();
      void run.append({ type: 'match', domain: 'www-acme.com', status: 'hit', company: 'acme.com', name: 'Acme' });
      void run.append(lookup('other.com'));
      const claim = run.append({ type: 'intent', company: 'acme.com', generation: 1, keyVersion: 1, key: 'k-acme' }, true);
      await vi.advanceTimersByTimeAsync(1);
      expect(batches).toStrictEqual([['www-acme.com', 'other.com', 'acme.com']]);
      await release();
      await expect(claim).resolves.toStrictEqual({ kind: 'ok' });
    });

    it('writes no empty batch once everything went with an intent', async () => {
      const { batches, release, run } = heldRun();
      void run.append({ type: 'match', domain: 'www.acme.com', status: 'hit', company: 'acme.com', name: 'Acme' });
      const claim = run.append({ type: 'intent', company: 'acme.com', generation: 1, keyVersion: 1, key: 'k-acme' }, true);
      await vi.advanceTimersByTimeAsync(1);
      expect(batches).toStrictEqual([['www.acme.com', 'acme.com']]);
      await release();
      await claim;
      const flushed = run.flush();
      await vi.advanceTimersByTimeAsync(0);
      expect(batches).toHaveLength(1);
      await flushed;
    });
  });

  it("keeps a domain's last lookup when it goes ahead with an intent", async () => {
    const store = open();
    const run = store.beginRun('svc', info);
    void run.append({ type: 'match', domain: 'www.acme.com', status: 'miss' });
    void run.append({ type: 'match', domain: 'www.acme.com', status: 'hit', company: 'acme.com', name: 'Acme' });
    await run.append({ type: 'intent', company: 'acme.com', generation: 1, keyVersion: 1, key: 'k-acme' }, true);
    await run.flush();
    const seen: string[] = [];
    await run.loadLookups(['www.acme.com'], () => 0, (_i, l) => seen.push(l.status));
    expect(seen).toStrictEqual(['hit']);
  });

  it('ends its read transaction before it answers, so a write on the same connection lands', async () => {
    const store = open();
    const run = store.beginRun('svc', info);
    void run.append({ type: 'intent', company: 'a.com', generation: 1, keyVersion: 1, key: 'k-a.com' }, true);
    void run.append(hit('a.com'));
    await run.flush();
    void run.append({ type: 'match', domain: 'b.com', status: 'miss' });
    const found = await run.records(['a.com', 'b.com']);
    expect([...found.keys()]).toStrictEqual(['a.com']);
    expect(store.db.inTransaction).toBe(false);
    await run.flush();
    await run.releaseClaims();
    await run.endRun({ status: 'done', credits: 1, bought: 1, reused: 0 });
    expect(store.db.inTransaction).toBe(false);
    expect(open(store.path).db.prepare('SELECT status FROM runs WHERE id = ?').raw(true).get(run.runId)).toStrictEqual(['done']);
  });

  // The writer sorts lookups by key, stably.
  it('keeps the last of two lookups of one domain', async () => {
    const run = open().beginRun('svc', info);
    void run.append({ type: 'match', domain: 'b.com', status: 'miss' });
    void run.append({ type: 'match', domain: 'a.com', status: 'hit', company: 'acme.com', name: 'Acme' });
    void run.append({ type: 'match', domain: 'a.com', status: 'miss' });
    await run.flush();
    const seen: [number, string][] = [];
    await run.loadLookups(['a.com', 'b.com'], (d) => ['a.com', 'b.com'].indexOf(d), (i, l) => seen.push([i, l.status]));
    expect(seen.sort()).toStrictEqual([
      [0, 'miss'],
      [1, 'miss'],
    ]);
  });

  it('switches a new store to WAL, waiting out SQLITE_BUSY from another run switching it too', () => {
    const busy = Object.assign(new Error('database is locked'), { code: 'SQLITE_BUSY' });
    let calls = 0;
    enableWal({ pragma: () => (++calls < 4 ? raise(busy) : 'wal') } as never);
    expect(calls).toBe(4);
    // Anything else is not waited out.
    const corrupt = Object.assign(new Error('file is not a database'), { code: 'SQLITE_NOTADB' });
    expect(() => enableWal({ pragma: () => raise(corrupt) } as never)).toThrow(corrupt);
  });

  it('lets one run claim a purchase: another live run is told busy, then sees it held', async () => {
    const path = join(files.dir.path, 'shared.db');
    const first = open(path);
    const a = first.beginRun('svc', info);
    const b = open(path).beginRun('svc', info);
    expect(await a.append({ type: 'intent', company: 'acme.com', generation: 1, keyVersion: 1, key: 'k1' }, true)).toStrictEqual({ kind: 'ok' });
    // Run a stands for another live process (our parent): its claim holds.
    first.db.prepare('UPDATE runs SET pid = ? WHERE id = ?').run(process.ppid, a.runId);
    // Named, for a person to see what the run waits on.
    expect(await b.append({ type: 'intent', company: 'acme.com', generation: 1, keyVersion: 1, key: 'k1' }, true)).toStrictEqual({ kind: 'busy', pid: process.ppid });
    await a.append(hit('acme.com'));
    await a.flush();
    const claim = await b.append({ type: 'intent', company: 'acme.com', generation: 1, keyVersion: 1, key: 'k1' }, true);
    expect(claim.kind).toBe('held');
    expect(((await b.records(['acme.com'])).get('acme.com') ?? null)?.name).toBe('acme.com');
  });

  it('lets a live run release a purchase it could not finish, for another to take over', async () => {
    const path = join(files.dir.path, 'released.db');
    const first = open(path);
    const a = first.beginRun('svc', info);
    const b = open(path).beginRun('svc', info);
    // Run a stands for another live process (our parent); its answer was lost, so its key is kept.
    first.db.prepare('UPDATE runs SET pid = ? WHERE id = ?').run(process.ppid, a.runId);
    expect(await a.append({ type: 'intent', company: 'acme.com', generation: 1, keyVersion: 1, key: 'k1' }, true)).toStrictEqual({ kind: 'ok' });
    await a.append({ type: 'enrich', company: 'acme.com', generation: 1, keyVersion: 1, status: 'error', code: 'timeout', verdict: 'kept', lost: true });
    await a.flush();
    expect((await b.append({ type: 'intent', company: 'acme.com', generation: 1, keyVersion: 1, key: 'k1' }, true)).kind).toBe('busy');
    await a.append({ type: 'release', company: 'acme.com', generation: 1 });
    await a.flush();
    // Taken over under the same key, whose fate is open: the next attempt replays, never pays twice.
    expect(await b.append({ type: 'intent', company: 'acme.com', generation: 1, keyVersion: 1, key: 'k1' }, true)).toStrictEqual({ kind: 'ok', tookOver: true });
    // A release by a run that no longer owns the purchase changes nothing.
    await a.append({ type: 'release', company: 'acme.com', generation: 1 });
    await a.flush();
    expect(first.db.prepare('SELECT owner_run FROM purchases').raw(true).get()).toStrictEqual([b.runId]);
  });

  it('retires only the key a run sent under, and not once another run took the purchase over', async () => {
    const path = join(files.dir.path, 'retire.db');
    const store = open(path);
    const a = store.beginRun('svc', info);
    await a.append({ type: 'intent', company: 'acme.com', generation: 1, keyVersion: 1, key: 'k1' }, true);
    await a.append({ type: 'intent', company: 'beta.com', generation: 1, keyVersion: 1, key: 'b1' }, true);
    await a.flush();
    const b = open(path).beginRun('svc', info);
    // As after run a's lease lapsed on another host: run b took acme.com over and may be sending under k1.
    store.db.prepare("UPDATE purchases SET owner_run = ? WHERE domain = 'acme.com'").run(b.runId);
    await a.append({ type: 'enrich', company: 'acme.com', generation: 1, keyVersion: 1, status: 'error', code: 'internal', verdict: 'retired' });
    // A retire for a key version the purchase has already left behind changes nothing either.
    await a.append({ type: 'enrich', company: 'beta.com', generation: 1, keyVersion: 0, status: 'error', code: 'internal', verdict: 'retired' });
    await a.flush();
    const keys = (): unknown => store.db.prepare('SELECT domain, key_version, intent_key FROM purchases ORDER BY domain').raw(true).all();
    expect(keys()).toStrictEqual([['acme.com', 1, 'k1'], ['beta.com', 1, 'b1']]);
    // Its own key, still its own: retired, for the next attempt to take a new one.
    await a.append({ type: 'enrich', company: 'beta.com', generation: 1, keyVersion: 1, status: 'error', code: 'internal', verdict: 'retired' });
    await a.flush();
    expect(keys()).toStrictEqual([['acme.com', 1, 'k1'], ['beta.com', 2, null]]);
    // Run b's answer under k1 was lost (maybe charged), and b handed the purchase back: a's late
    // retire must still not forget that k1 may have been charged.
    await b.append({ type: 'enrich', company: 'acme.com', generation: 1, keyVersion: 1, status: 'error', code: 'network_error', verdict: 'kept', lost: true });
    await b.append({ type: 'release', company: 'acme.com', generation: 1 });
    await b.flush();
    await a.append({ type: 'enrich', company: 'acme.com', generation: 1, keyVersion: 1, status: 'error', code: 'internal', verdict: 'retired' });
    await a.flush();
    expect(store.db.prepare("SELECT key_version, intent_key, uncertain, owner_run FROM purchases WHERE domain = 'acme.com'").raw(true).get()).toStrictEqual([1, 'k1', 1, null]);
  });

  it('gives back only its own claim, not one another run has taken over', async () => {
    const path = join(files.dir.path, 'unclaim.db');
    const store = open(path);
    const a = store.beginRun('svc', info);
    await a.append({ type: 'intent', company: 'acme.com', generation: 1, keyVersion: 1, key: 'k1' }, true);
    await a.flush();
    const b = open(path).beginRun('svc', info);
    // As after run a's lease lapsed on another host: run b took the purchase over and is sending under k1.
    store.db.prepare("UPDATE purchases SET owner_run = ? WHERE domain = 'acme.com'").run(b.runId);
    // Run a, stopped before it sent anything, gives back what it thinks is its claim.
    await a.append({ type: 'unclaim', company: 'acme.com', generation: 1, keyVersion: 1, key: 'k1' });
    await a.flush();
    expect(store.db.prepare("SELECT intent_key, owner_run, lost_at IS NOT NULL FROM purchases WHERE domain = 'acme.com'").raw(true).get()).toStrictEqual(['k1', b.runId, 1]);
    // Its own claim it gives back.
    await a.append({ type: 'intent', company: 'beta.com', generation: 1, keyVersion: 1, key: 'b1' }, true);
    await a.append({ type: 'unclaim', company: 'beta.com', generation: 1, keyVersion: 1, key: 'b1' });
    await a.flush();
    expect(store.db.prepare("SELECT intent_key, owner_run FROM purchases WHERE domain = 'beta.com'").raw(true).get()).toStrictEqual([null, null]);
  });

  it('hands back a purchase another run moved on, and takes over one whose run is gone', async () => {
    const path = join(files.dir.path, 'moved.db');
    const store = open(path);
    const a = store.beginRun('svc', info);
    await a.append({ type: 'intent', company: 'acme.com', generation: 1, keyVersion: 1, key: 'k1' }, true);
    await a.append({ type: 'enrich', company: 'acme.com', generation: 1, keyVersion: 1, status: 'error', code: 'internal', verdict: 'retired' });
    await a.flush();
    // The run ended without releasing its claims: as after a kill -9 of another process.
    store.db.prepare("UPDATE runs SET status = 'done'").run();
    const b = open(path).beginRun('svc', info);
    const stale = await b.append({ type: 'intent', company: 'acme.com', generation: 1, keyVersion: 1, key: 'k1' }, true);
    expect(stale).toMatchObject({ kind: 'moved', purchase: { keyVersion: 2, intentKey: null } });
    expect(await b.append({ type: 'intent', company: 'acme.com', generation: 1, keyVersion: 2, key: 'k2' }, true)).toStrictEqual({ kind: 'ok' });
  });

  it('keeps a record of an older generation from replacing a newer one', async () => {
    const run = open().beginRun('svc', info);
    await run.append(hit('acme.com', 2));
    await run.append({ ...hit('acme.com', 1), record: { ...record('acme.com'), name: 'Old' } } as StoreEvent);
    await run.flush();
    expect(((await run.records(['acme.com'])).get('acme.com') ?? null)?.name).toBe('acme.com');
    expect((await run.companyState('acme.com')).held?.generation).toBe(2);
  });

  it('treats a tampered record as not held, and refuses a file that is not a store with exit 2', async () => {
    const store = open();
    const run = store.beginRun('svc', info);
    await run.append(hit('acme.com'));
    await run.flush();
    store.db.prepare("UPDATE companies SET record = '{\"domain\": 5}'").run();
    expect(((await run.records(['acme.com'])).get('acme.com') ?? null)).toBeNull();
    const junk = join(files.dir.path, 'junk.db');
    writeFileSync(junk, 'this is not a database, just some text that is long enough to look like a header. '.repeat(20));
    expect(() => open(junk)).toThrow(expect.objectContaining({ kind: 'usage', message: expect.stringContaining('damaged or not an enrich store') }));
  });

  it('stamps its schema version and refuses a store a newer enrich wrote', () => {
    const path = join(files.dir.path, 'versioned.db');
    open(path).close();
    const raw = new (libsql())(path);
    expect(raw.pragma('user_version', { simple: true })).toBeGreaterThan(0);
    raw.pragma('user_version = 99');
    raw.close();
    expect(() => open(path)).toThrow(expect.objectContaining({ kind: 'usage', message: `the store ${path} was written by a newer enrich (schema 99); upgrade enrich to use it` }));
  });

  it('says in one line that the store is locked when a run cannot begin', () => {
    const path = join(files.dir.path, 'locked.db');
    const holder = open(path);
    holder.db.exec('BEGIN IMMEDIATE');
    const waiting = open(path);
    // The busy timeout, without its 15 seconds.
    waiting.db.pragma('busy_timeout = 0');
    expect(() => waiting.beginRun('svc', info)).toThrow(expect.objectContaining({ kind: 'failure', message: expect.stringMatching(/^cannot write the store .*another process holds it locked for too long/) }));
    holder.db.exec('ROLLBACK');
  });

  it('stops paid work with a clear error when the store cannot be written', async () => {
    const store = open();
    const run = store.beginRun('svc', info);
    store.db.exec('PRAGMA query_only = ON');
    await expect(run.append({ type: 'intent', company: 'acme.com', generation: 1, keyVersion: 1, key: 'k1' }, true)).rejects.toThrow(/cannot write the store .*no further paid call was made/);
    await expect(run.append(hit('b.com'))).rejects.toThrow(/cannot write the store/);
  });

  it('tells a live run from a dead one: a lapsed heartbeat, a reused pid, but never a pause', async () => {
    const path = join(files.dir.path, 'lease.db');
    const first = open(path);
    const a = first.beginRun('svc', info);
    await a.append({ type: 'intent', company: 'acme.com', generation: 1, keyVersion: 1, key: 'k1' }, true);
    const b = open(path).beginRun('svc', info);
    const claim = () => b.append({ type: 'intent', company: 'acme.com', generation: 1, keyVersion: 1, key: 'k1' }, true);
    const owned = (update: string, ...params: unknown[]): void => {
      first.db.prepare(update).run(...params);
      first.db.prepare('UPDATE purchases SET owner_run = ?').run(a.runId);
    };
    // Another host, heartbeat lapsed: dead; its intent is taken over, and said to be.
    owned("UPDATE runs SET host = 'container-a1b2', heartbeat_at = ? WHERE id = ?", Date.now() - LEASE_MS - 1, a.runId);
    expect(await claim()).toStrictEqual({ kind: 'ok', tookOver: true });
    // Another host, heartbeat fresh: alive.
    owned('UPDATE runs SET heartbeat_at = ? WHERE id = ?', Date.now(), a.runId);
    expect((await claim()).kind).toBe('busy');
    // This host, a process that exists (our parent) but has not beaten for long (Ctrl-Z): alive.
    owned('UPDATE runs SET host = ?, pid = ?, heartbeat_at = 0 WHERE id = ?', first.host, process.ppid, a.runId);
    expect((await claim()).kind).toBe('busy');
    // This host, the pid now belongs to a process that started after the run did: dead.
    owned('UPDATE runs SET started_at = 0 WHERE id = ?', a.runId);
    expect((await claim()).kind).toBe('ok');
  });

  it('lists as at risk only purchases whose run is gone, never one a live run is sending', async () => {
    const store = open();
    const live = store.beginRun('svc', info);
    await live.append({ type: 'intent', company: 'sending.com', generation: 1, keyVersion: 1, key: 'k1' }, true);
    store.db.prepare('UPDATE runs SET pid = ? WHERE id = ?').run(process.ppid, live.runId);
    expect(atRisk(store, [])).toStrictEqual([]);
    store.db.prepare("UPDATE runs SET status = 'interrupted' WHERE id = ?").run(live.runId);
    expect(atRisk(store, []).map((p) => p.domain)).toStrictEqual(['sending.com']);
  });

  it('gives back an intent nothing was sent under: not at risk, not held from other runs', async () => {
    const store = open();
    const run = store.beginRun('svc', info);
    await run.append({ type: 'intent', company: 'acme.com', generation: 1, keyVersion: 1, key: 'k1' }, true);
    await run.append({ type: 'unclaim', company: 'acme.com', generation: 1, keyVersion: 1, key: 'k1' });
    await run.flush();
    store.db.prepare("UPDATE runs SET status = 'stopped'").run();
    expect(atRisk(store, [])).toStrictEqual([]);
    expect((await run.companyState('acme.com')).purchase).toMatchObject({ outcome: 'open', intentKey: null, keyVersion: 1 });
  });

  it('upgrades a store of an earlier layout, and refuses one missing a column it cannot add', async () => {
    const path = join(files.dir.path, 'older.db');
    const older = open(path);
    older.db.exec('ALTER TABLE runs DROP COLUMN heartbeat_at; ALTER TABLE runs DROP COLUMN policy_now; ALTER TABLE purchases DROP COLUMN lost_at');
    older.close();
    const upgraded = open(path);
    const run = upgraded.beginRun('svc', info);
    expect(await run.append({ type: 'intent', company: 'acme.com', generation: 1, keyVersion: 1, key: 'k1', at: 5 }, true)).toStrictEqual({ kind: 'ok' });
    expect((await run.companyState('acme.com')).purchase?.lostAt).toBe(5);
    upgraded.close();
    const edited = join(files.dir.path, 'edited.db');
    open(edited).db.exec('ALTER TABLE companies DROP COLUMN record');
    expect(() => open(edited)).toThrow(expect.objectContaining({ kind: 'usage', message: expect.stringContaining('lacks companies.record') }));
  });

  it('never leaves a failed write unhandled, though outcomes are not awaited', async () => {
    const store = open();
    const run = store.beginRun('svc', info);
    store.db.exec('PRAGMA query_only = ON');
    void run.append(hit('a.com'));
    await expect(run.flush()).rejects.toThrow(/cannot write the store/);
    void run.append(hit('b.com'));
    await new Promise((r) => setTimeout(r, 10));
  });

  it("keeps a job's freshness cutoff only for a prompt rerun of that job cut short", () => {
    let now = 1_000_000_000;
    const store = files.open(join(files.dir.path, 'policy.db'), { now: () => now });
    const job = { ...info, options: { max_age_ms: 0 } };
    const first = store.beginRun('svc', job);
    expect(first.policyNow).toBe(now);
    first.endRun({ status: 'interrupted', credits: 0, bought: 0, reused: 0 });
    now += 60_000;
    const resumed = store.beginRun('svc', job);
    expect(resumed.policyNow).toBe(1_000_000_000);
    resumed.endRun({ status: 'done', credits: 0, bought: 0, reused: 0 });
    now += 60_000;
    expect(store.beginRun('svc', job).policyNow).toBe(now);
    // A plain run in between, or a day gone by, starts a new job.
    const cut = store.beginRun('svc', job);
    cut.endRun({ status: 'stopped', credits: 0, bought: 0, reused: 0 });
    store.beginRun('svc', info).endRun({ status: 'done', credits: 0, bought: 0, reused: 0 });
    expect(store.beginRun('svc', job).policyNow).toBe(now);
    const late = store.beginRun('svc', job);
    late.endRun({ status: 'interrupted', credits: 0, bought: 0, reused: 0 });
    now += 25 * 3600_000;
    expect(store.beginRun('svc', job).policyNow).toBe(now);
  });
});

function raise(error: Error): never {
  throw error;
}
