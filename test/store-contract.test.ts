import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, inject, it } from 'vitest';
import type { CompanyRecord } from '../src/api/types.js';
import type { BudgetView } from '../src/store/budget.js';
import { copyStore, type Copied } from '../src/store/copy.js';
import pg from 'pg';
import { idempotencyKey } from '../src/pipeline/idempotency-key.js';
import { importJournal } from '../src/store/import-journal.js';
import { openLedgerStore } from '../src/store/open.js';
import { PgStore } from '../src/store/postgres/store.js';
import { BatchPlan, commitBatch, LEASE_MS } from '../src/store/postgres/writer.js';
import { Store } from '../src/store/sqlite/store.js';
import { mulberry32 } from '../src/sandbox/random.js';
import type { Claim, CompanyState, Lookup, ServiceStore, StoreEvent } from '../src/store/types.js';
import { tempDir } from './helpers/cli.js';
import { MemoryStore } from './helpers/memory-store.js';
import { PGBOUNCER, startPgBouncer, type Pooler } from './helpers/pgbouncer.js';
import { freshDatabase, sql } from './helpers/postgres.js';
import { companyRecord } from './helpers/records.js';

/**
 * The store contract (src/store/types.ts ServiceStore), one suite every backend runs (River's
 * riverdrivertest is the model): the SQLite store, the PostgreSQL team store direct, and the
 * same through PgBouncer in transaction mode. Every scenario goes through ServiceStore only, but
 * for `raw`, which plays what another process does to the store (a run that died, a clock that
 * moved on). What the team store does beyond the contract is test/team-store.test.ts.
 */
interface Opened {
  /** The store's address, as --store takes it. */
  address: string;
  /** A new run, against `service` (default 'svc'). */
  begin(service?: string, options?: Record<string, unknown>): Promise<ServiceStore>;
  /** Opens the store now; the run begins when the function it gives is called. */
  opening(): Promise<() => Promise<ServiceStore>>;
  /** One statement, with `?` placeholders, on the store's own tables. */
  raw(text: string, ...params: unknown[]): Promise<Record<string, unknown>[]>;
  close(): Promise<void>;
}

interface Backend {
  name: string;
  open(): Promise<Opened>;
}

const info = { inputName: 'in.csv', inputSha256: 'x', rows: 1, dryRun: false, options: {} };

const sqlite: Backend = {
  name: 'sqlite',
  async open() {
    const dir = tempDir();
    const path = join(dir.path, 'store.db');
    const stores: Store[] = [];
    const open = (): Store => {
      const s = Store.open(path, { tool: 'test' });
      stores.push(s);
      return s;
    };
    const admin = open();
    return {
      address: path,
      begin: async (service = 'svc', options = {}) => open().beginRun(service, { ...info, options }),
      opening: async () => {
        const s = open();
        return async () => s.beginRun('svc', info);
      },
      raw: async (text, ...params) => {
        const statement = admin.db.prepare(text);
        return /^\s*select/i.test(text) ? (statement.all(...params) as Record<string, unknown>[]) : (statement.run(...params), []);
      },
      close: async () => {
        for (const s of stores) s.close();
        dir.cleanup();
      },
    };
  },
};

let pgRan = 0;
/** A store at `url` (reached at `through`: a pooler's address); `raw` plays another session, straight to the server. */
async function postgresAt(url: string, through = url): Promise<Opened> {
    const stores: PgStore[] = [];
    pgRan++;
    const store = async (): Promise<PgStore> => {
      const s = await PgStore.open(through, { tool: 'test' });
      stores.push(s);
      return s;
    };
    return {
      address: through,
      begin: async (service = 'svc', options = {}) => (await store()).beginRun(service, { ...info, options }),
      opening: async () => {
        const s = await store();
        return async () => s.beginRun('svc', info);
      },
      raw: async (text, ...params) => {
        let n = 0;
        return sql(url, text.replace(/\?/g, () => `$${++n}`), params);
      },
      close: async () => {
        for (const s of stores) await s.close();
      },
    };
}
const postgres: Backend = { name: 'postgres', open: async () => postgresAt(await freshDatabase()) };

/**
 * PostgreSQL through PgBouncer in transaction mode (Supabase's pooler port, Neon's -pooler host):
 * no session is kept from one transaction to the next. Started when first used.
 */
let pooler: Promise<Pooler> | null = null;
let pooledRan = 0;
const pooled: Backend = {
  name: 'postgres through PgBouncer (transaction mode)',
  open: async () => {
    pooler ??= startPgBouncer(inject('postgresUrl'), 'transaction');
    const url = await freshDatabase();
    pooledRan++;
    return postgresAt(url, (await pooler).through(url));
  },
};
if (PGBOUNCER === undefined) process.stderr.write('test/store-contract.test.ts: the pooled backend is skipped, pgbouncer is missing (apt-get install pgbouncer)\n');
/** Every backend the contract runs against: SQLite, PostgreSQL direct, and through a transaction pooler. */
const backends = PGBOUNCER === undefined ? [sqlite, postgres] : [sqlite, postgres, pooled];

afterAll(async () => {
  await (await pooler)?.stop();
  // .ci/run checks these: the PostgreSQL and pooler halves of the suite ran, and were not skipped.
  const marker = process.env['ENRICH_TEST_POSTGRES_MARKER'];
  if (marker !== undefined && marker !== '' && pgRan > 0) writeFileSync(marker, `${pgRan} postgres scenarios\n`, { flag: 'a' });
  const pooledMarker = process.env['ENRICH_TEST_PGBOUNCER_MARKER'];
  if (pooledMarker !== undefined && pooledMarker !== '' && pooledRan > 0) writeFileSync(pooledMarker, `${pooledRan} pooled contract scenarios\n`, { flag: 'a' });
});

const record = (domain: string, name = domain): CompanyRecord => companyRecord(domain, { name, employee_count: 5, specialties: ['x'] });
const intent = (c: string, extra: Partial<Extract<StoreEvent, { type: 'intent' }>> = {}): StoreEvent => ({ type: 'intent', company: c, generation: 1, keyVersion: 1, key: `k-${c}`, ...extra });
const hit = (c: string, g = 1, at = Date.now()): StoreEvent => ({ type: 'enrich', company: c, generation: g, keyVersion: 1, status: 'hit', charged: 1, record: record(c), keyUsed: `k-${c}`, at });

/** The companies a seeded sequence of events plays over (the rule's contract case below). */
const COMPANIES = ['acme.com', 'bolt.io', 'crux.dev'];

const recordAt = (domain: string, at: number): CompanyRecord => companyRecord(domain, { name: `${domain} at ${at}` });

/** Two runs begun now claim open.com under `key`: the second first, then its `answer` (it holds on to a retired key); what the first is told. */
async function secondClaim(s: Opened, key: string, answer: 'miss' | 'retired'): Promise<Claim['kind']> {
  const [a, b] = [await s.begin(), await s.begin()];
  expect(await b.append(intent('open.com', { key }), true)).toMatchObject({ kind: 'ok' });
  const base = { type: 'enrich', company: 'open.com', generation: 1, keyVersion: 1, at: Date.now() } as const;
  await b.append(answer === 'miss' ? { ...base, status: 'miss', charged: 0, keyUsed: key } : { ...base, status: 'error', code: 'validation_error', verdict: 'retired' });
  await b.flush();
  return (await a.append(intent('open.com', { key }), true)).kind;
}

/** Imports a 0.1 journal of 2024 that bought bolt.io under its own key. */
async function importBoltBought(address: string): Promise<void> {
  const dir = tempDir();
  await importJournalAt(address, join(dir.path, 'in.csv.enrich-journal'), THEN, [
    { t: 'intent', c: 'bolt.io', v: 1, key: 'key-bolt' },
    { t: 'enrich', c: 'bolt.io', v: 1, s: 'hit', charged: 1, company: record('bolt.io') },
  ]);
  dir.cleanup();
}

/** What a new run's claim of new.com is answered. */
async function newClaim(s: Opened): Promise<Claim['kind']> {
  const run = await s.begin();
  return (await run.append(intent('new.com', { key: idempotencyKey(run.storeId, 'new.com', 1, 1) }), true)).kind;
}

/** Copies the store at `from` into `s` with a cap of `cap` for `person` there: what the copy said and the budget after; null where a pooler refused it. */
async function copyUnderCap(from: string, s: Opened, person: string, cap: number, now?: () => number): Promise<{ copied: Copied; budget: BudgetView } | null> {
  const source = await openLedgerStore(from, { tool: 'test', env: {}, write: false, create: false });
  const target = await openLedgerStore(s.address, { tool: 'test', ...(now === undefined ? {} : { now }), env: {}, write: true, create: false });
  try {
    await target.setBudget(person, cap, 'test');
    const into = await target.copyTarget(false).catch((error: unknown) => {
      if (/pools in transaction mode/.test(String(error))) return null;
      throw error;
    });
    if (into === null) return null;
    const reading = await source.copySource();
    const copied = await copyStore(reading, into);
    await reading.end();
    await into.end();
    return { copied, budget: await target.budget() };
  } finally {
    await source.close();
    await target.close();
  }
}

/** When the 0.1 journals of these tests ran. */
const THEN = Date.parse('2024-01-05T10:00:00Z');

/** Writes a 0.1 journal at `path` (its run named after `at`), a session at `at`, then `lines`; and imports it into the store at `address`. */
async function importJournalAt(address: string, path: string, at: number, lines: object[]): Promise<unknown> {
  const head = [
    { t: 'header', format: 1, run: `r${at}`, created: new Date(at).toISOString(), tool: 't', input: { sha256: 'x', bytes: 1, name: 'in.csv' }, column: 'domain', service: 'svc' },
    { t: 'session', n: 1, at: new Date(at).toISOString(), pid: 1, dry_run: false },
  ];
  writeFileSync(path, [...head, ...lines].map((l) => `${JSON.stringify(l)}\n`).join(''));
  const ledger = await openLedgerStore(address, { tool: 'test', env: {}, write: true, create: true });
  try {
    return await importJournal(ledger, path);
  } finally {
    await ledger.close();
  }
}

/** One step of a seeded sequence: which run (0 or 1) appends which event. */
interface Step {
  run: 0 | 1;
  event: StoreEvent;
}

function steps(seed: number, count: number): Step[] {
  const r = mulberry32(seed);
  const pick = <T,>(list: readonly T[]): T => list[Math.floor(r() * list.length)] as T;
  let at = 1_700_000_000_000;
  const out: Step[] = [];
  for (let i = 0; i < count; i++) {
    at += 1_000;
    const company = pick(COMPANIES);
    const generation = pick([1, 1, 2]);
    const keyVersion = pick([1, 1, 2]);
    const key = `k-${company}-${generation}-${keyVersion}`;
    const run = pick([0, 1] as const);
    const roll = r();
    let event: StoreEvent;
    if (roll < 0.35) {
      const fresh = pick([undefined, null, at - 5_000, at - 500_000]);
      // The sending run's settle, kept with the purchase (the longest of those sent under its key).
      const settleMs = pick([undefined, 60_000, 600_000]);
      event = { type: 'intent', company, generation, keyVersion, key, at, ...(fresh === undefined ? {} : { freshSince: fresh }), ...(settleMs === undefined ? {} : { settleMs }) };
    } else if (roll < 0.75) {
      const status = pick(['hit', 'miss', 'error', 'error'] as const);
      const base = { type: 'enrich' as const, company, generation, keyVersion, at };
      if (status === 'hit') event = { ...base, status, charged: pick([0, 1]), record: recordAt(company, at), keyUsed: key };
      else if (status === 'miss') event = { ...base, status, charged: 0 };
      else {
        const final = r() < 0.2;
        const verdict = pick(['retired', 'kept'] as const);
        event = { ...base, status, code: pick(['internal', 'network_error', 'validation_error']), verdict, ...(final ? { final: true } : {}), ...(r() < 0.3 ? { lost: true, settleMs: pick([60_000, 120_000, 600_000]) } : {}), ...(verdict === 'retired' && r() < 0.3 ? { unconfirmed: true } : {}) };
      }
    } else if (roll < 0.88) {
      event = { type: 'release', company, generation };
    } else {
      event = { type: 'unclaim', company, generation, keyVersion, key };
    }
    out.push({ run, event });
  }
  return out;
}

/**
 * Groups of events over 14 companies, each appended at once (one batch) or one by one: claims,
 * answers charged or not (some closed last month), lost and retired keys, final errors, unclaims.
 */
function cappedSteps(seed: number, count: number): StoreEvent[][] {
  const r = mulberry32(seed);
  const pick = <T,>(list: readonly T[]): T => list[Math.floor(r() * list.length)] as T;
  const companies = Array.from({ length: 14 }, (_, k) => `c${k}.com`);
  const now = new Date();
  const lastMonth = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1) - 1_000;
  const out: StoreEvent[][] = [];
  for (let i = 0; i < count; i++) {
    const group: StoreEvent[] = [];
    for (let j = 1 + Math.floor(r() * 5); j > 0; j--) {
      const company = pick(companies);
      const keyVersion = pick([1, 1, 2]);
      const key = `k-${company}-${keyVersion}`;
      const roll = r();
      const base = { type: 'enrich' as const, company, generation: 1, keyVersion, at: r() < 0.3 ? lastMonth : Date.now() };
      if (roll < 0.45) group.push({ type: 'intent', company, generation: 1, keyVersion, key });
      else if (roll < 0.55) group.push({ ...base, status: 'hit', charged: pick([0, 1]), record: recordAt(company, 1), keyUsed: key });
      else if (roll < 0.65) group.push({ ...base, status: 'miss', charged: 0 });
      else if (roll < 0.75) group.push({ ...base, status: 'error', code: 'network_error', verdict: 'kept', lost: true });
      else if (roll < 0.85) group.push({ ...base, status: 'error', code: 'internal', verdict: 'retired', ...(r() < 0.5 ? { unconfirmed: true } : {}) });
      else if (roll < 0.92) group.push({ ...base, status: 'error', code: 'validation_error', final: true });
      else group.push({ type: 'unclaim', company, generation: 1, keyVersion, key });
    }
    out.push(group);
  }
  return out;
}

describe.each(backends)('the store contract: $name', (backend) => {
  let opened: Opened;
  afterEach(async () => {
    await opened?.close();
  });
  const open = async (): Promise<Opened> => (opened = await backend.open());

  it('keeps intents, outcomes and lookups, with their ages, and says whether it holds anything', async () => {
    const s = await open();
    const a = await s.begin();
    expect(await a.holdsAny()).toBe(false);
    await a.append({ type: 'match', domain: 'www-acme.com', status: 'hit', company: 'acme.com', name: 'Acme' });
    await a.append({ type: 'match', domain: 'nobody.com', status: 'miss' });
    await a.append({ type: 'match', domain: 'broken.com', status: 'error', code: 'internal' });
    expect(await a.append(intent('acme.com'), true)).toStrictEqual({ kind: 'ok' });
    const during = await a.companyState('acme.com');
    expect(during.purchase).toMatchObject({ outcome: 'open', keyVersion: 1, intentKey: 'k-acme.com' });
    await a.append(hit('acme.com', 1, 1_700_000_000_000));
    await a.flush();
    expect(await a.holdsAny()).toBe(true);
    const lookups: [number, Lookup][] = [];
    const domains = ['www-acme.com', 'nobody.com', 'broken.com', 'never.com'];
    await a.loadLookups(domains, (d) => domains.indexOf(d), (i, l) => lookups.push([i, l]));
    lookups.sort((x, y) => x[0] - y[0]);
    expect(lookups.map(([i, l]) => [i, l.status, l.company, l.name])).toStrictEqual([
      [0, 'hit', 'acme.com', 'Acme'],
      [1, 'miss', null, null],
    ]);
    expect(Math.abs((lookups[0]?.[1].checkedAt ?? 0) - Date.now())).toBeLessThan(60_000);
    const states = new Map<string, unknown>();
    await a.loadCompanies(['acme.com', 'other.com'], (d, st) => states.set(d, st));
    expect([...states.keys()]).toStrictEqual(['acme.com']);
    expect(states.get('acme.com')).toMatchObject({
      held: { domain: 'acme.com', name: 'acme.com', boughtAt: 1_700_000_000_000, lastUpdated: '2026-01-01T00:00:00Z', generation: 1, credits: 1 },
      purchase: { outcome: 'hit', intentKey: null, closedAt: 1_700_000_000_000, uncertain: false },
    });
    expect((await a.records(['acme.com', 'other.com'])).get('acme.com')).toStrictEqual(record('acme.com'));
    expect((await a.records(['acme.com', 'other.com'])).has('other.com')).toBe(false);
  });

  it('reserves each claim under the monthly caps: spent when charged, freed unless lost', async () => {
    const s = await open();
    const a = await s.begin();
    const [me] = await s.raw('SELECT "user" AS person FROM runs WHERE id = ?', a.runId);
    await s.raw("INSERT INTO budgets (person, credits, set_at) VALUES ('', 3, 0)");
    const line = async (): Promise<unknown> => (await a.budget()).map((l) => [l.person, l.cap, l.spent, l.held, l.left]);
    for (const c of ['a.com', 'b.com', 'c.com']) expect(await a.append(intent(c), true)).toStrictEqual({ kind: 'ok' });
    expect(await line()).toStrictEqual([[null, 3, 0, 3, 0]]);
    // No room: nothing written, nothing to send.
    expect(await a.append(intent('d.com'), true)).toStrictEqual({ kind: 'capped', person: null, cap: 3 });
    expect((await a.companyState('d.com')).purchase).toBeNull();
    // a.com: a miss costs nothing and gives its room back; b.com is charged; c.com was never sent.
    await a.append({ type: 'enrich', company: 'a.com', generation: 1, keyVersion: 1, status: 'miss', charged: 0, keyUsed: 'k-a.com' });
    await a.append(hit('b.com'));
    await a.append({ type: 'unclaim', company: 'c.com', generation: 1, keyVersion: 1, key: 'k-c.com' });
    await a.flush();
    expect(await line()).toStrictEqual([[null, 3, 1, 0, 2]]);
    // A lost answer keeps its reservation (it may have been charged), and its key is claimed again without new room.
    expect(await a.append(intent('d.com'), true)).toStrictEqual({ kind: 'ok' });
    await a.append({ type: 'enrich', company: 'd.com', generation: 1, keyVersion: 1, status: 'error', code: 'network_error', verdict: 'kept', lost: true });
    expect(await a.append(intent('e.com'), true)).toStrictEqual({ kind: 'ok' });
    await a.flush();
    expect(await line()).toStrictEqual([[null, 3, 1, 2, 0]]);
    expect(await a.append(intent('f.com'), true)).toMatchObject({ kind: 'capped' });
    expect(await a.append(intent('d.com'), true)).toStrictEqual({ kind: 'ok' });
    // A person's cap binds when it is the tighter one, and names the person.
    await s.raw("UPDATE budgets SET credits = 100 WHERE person = ''");
    await s.raw('INSERT INTO budgets (person, credits, set_at) VALUES (?, 3, 0)', me?.['person']);
    expect(await a.append(intent('f.com'), true)).toStrictEqual({ kind: 'capped', person: me?.['person'], cap: 3 });
    await s.raw('DELETE FROM budgets WHERE person = ?', me?.['person']);
    expect(await a.append(intent('f.com'), true)).toStrictEqual({ kind: 'ok' });
  });

  // No reservation recorded: left open before budgets, copied or imported.
  it('counts an open purchase with no reservation as held; a batch sees room its misses free', async () => {
    const s = await open();
    const a = await s.begin();
    await s.raw("INSERT INTO budgets (person, credits, set_at) VALUES ('', 2, 0)");
    const [service] = await s.raw("SELECT id FROM services WHERE name = 'svc'");
    await s.raw("INSERT INTO purchases (service, domain, generation, key_version, intent_key, outcome, opened_at) VALUES (?, 'before.com', 1, 1, 'k-before.com', 'open', 1)", service?.['id']);
    expect((await a.budget()).map((l) => [l.spent, l.held, l.left])).toStrictEqual([[0, 1, 1]]);
    expect(await a.append(intent('a.com'), true)).toStrictEqual({ kind: 'ok' });
    expect(await a.append(intent('b.com'), true)).toMatchObject({ kind: 'capped' });
    // A miss and the next claim in one batch: the claim has the room the miss gave back.
    const [, claim] = await Promise.all([a.append({ type: 'enrich', company: 'a.com', generation: 1, keyVersion: 1, status: 'miss', charged: 0, keyUsed: 'k-a.com' }), a.append(intent('b.com'), true)]);
    expect(claim).toStrictEqual({ kind: 'ok' });
  });

  it("holds a dead run's reservations until a taker settles them; spend counts by closing month", async () => {
    const s = await open();
    const a = await s.begin();
    await s.raw("INSERT INTO budgets (person, credits, set_at) VALUES ('', 2, 0)");
    expect(await a.append(intent('a.com'), true)).toStrictEqual({ kind: 'ok' });
    expect(await a.append(intent('b.com'), true)).toStrictEqual({ kind: 'ok' });
    // Last month's purchases are not this month's spend.
    const [service] = await s.raw("SELECT id FROM services WHERE name = 'svc'");
    await s.raw("INSERT INTO purchases (service, domain, generation, key_version, outcome, opened_at, closed_at, credits) VALUES (?, 'old.com', 1, 1, 'hit', 1, 1000, 1)", service?.['id']);
    // a dies (kill -9): its intents may have been sent, so they stay held.
    await s.raw("UPDATE runs SET status = 'interrupted' WHERE id = ?", a.runId);
    const b = await s.begin();
    expect(await b.append(intent('c.com'), true)).toMatchObject({ kind: 'capped' });
    expect(await b.append(intent('a.com'), true)).toStrictEqual({ kind: 'ok', tookOver: true });
    await b.append({ type: 'enrich', company: 'a.com', generation: 1, keyVersion: 1, status: 'miss', charged: 0, keyUsed: 'k-a.com' });
    await b.flush();
    expect((await b.budget()).map((l) => [l.spent, l.held, l.left])).toStrictEqual([[0, 1, 1]]);
    expect(await b.append(intent('c.com'), true)).toStrictEqual({ kind: 'ok' });
  });

  it('tells a second run busy while a live run holds the claim, then held once it bought', async () => {
    const s = await open();
    const a = await s.begin();
    const b = await s.begin();
    expect(await a.append(intent('acme.com'), true)).toStrictEqual({ kind: 'ok' });
    expect(await b.append(intent('acme.com'), true)).toStrictEqual({ kind: 'busy', pid: process.pid });
    await a.append(hit('acme.com'));
    await a.flush();
    expect(await b.append(intent('acme.com'), true)).toMatchObject({ kind: 'held', held: { domain: 'acme.com', generation: 1 } });
  });

  // A clock set forward (an NTP step) makes a live run's process look started after it.
  it("keeps a live run here live across a clock step; takes a reused pid's stale run for gone", async () => {
    const s = await open();
    const a = await s.begin();
    expect(await a.append(intent('acme.com'), true)).toStrictEqual({ kind: 'ok' });
    // The clock stepped forward since run a began: its process now looks started after it.
    await s.raw('UPDATE runs SET started_at = ? WHERE id = ?', 1_000, a.runId);
    const b = await s.begin();
    // Before: taken for another program under a reused pid, its claim taken over, the company
    // bought again under the next key while a still sent under its own.
    expect(await b.append(intent('acme.com'), true)).toStrictEqual({ kind: 'busy', pid: process.pid });
    // A run of this host whose pid is another program's now (started after it), and whose heartbeat stopped a minute ago.
    const [service] = await s.raw("SELECT id FROM services WHERE name = 'svc'");
    await s.raw("INSERT INTO runs (service, started_at, heartbeat_at, pid, host, tool, dry_run, status) VALUES (?, 1000, ?, ?, ?, 'test', 0, 'running')", service?.['id'], Date.now() - 60_000, process.pid, hostname());
    const [gone] = await s.raw('SELECT max(id) AS id FROM runs');
    await s.raw("INSERT INTO purchases (service, domain, generation, key_version, intent_key, outcome, owner_run, opened_at) VALUES (?, 'bolt.com', 1, 1, 'k-bolt.com', 'open', ?, 1000)", service?.['id'], gone?.['id']);
    expect(await b.append(intent('bolt.com'), true)).toStrictEqual({ kind: 'ok', tookOver: true });
  });

  it('refuses a refresh of a record held fresh by the buyer\'s rule, and allows one held stale', async () => {
    const s = await open();
    const a = await s.begin();
    await a.append(intent('acme.com'), true);
    await a.append(hit('acme.com'));
    await a.flush();
    const b = await s.begin();
    const refresh = (freshSince: number | null): Promise<unknown> => b.append(intent('acme.com', { generation: 2, key: 'k2', freshSince }), true);
    expect(await refresh(null)).toMatchObject({ kind: 'held', held: { generation: 1 } });
    expect(await refresh(Date.now() - 60_000)).toMatchObject({ kind: 'held' });
    expect(await refresh(Date.now() + 60_000)).toStrictEqual({ kind: 'ok' });
  });

  it('hands back a purchase whose key another run retired, counted unconfirmed, for the new key', async () => {
    const s = await open();
    const a = await s.begin();
    await a.append(intent('acme.com'), true);
    await a.append({ type: 'enrich', company: 'acme.com', generation: 1, keyVersion: 1, status: 'error', code: 'internal', verdict: 'retired', unconfirmed: true });
    await a.flush();
    await a.endRun({ status: 'done', credits: 0, bought: 0, reused: 0 });
    const b = await s.begin();
    expect(await b.append(intent('acme.com'), true)).toMatchObject({ kind: 'moved', purchase: { keyVersion: 2, intentKey: null, unconfirmed: 1, errorCode: 'internal' } });
    expect(await b.append(intent('acme.com', { keyVersion: 2, key: 'k2' }), true)).toStrictEqual({ kind: 'ok' });
  });

  it("takes over a dead run's claim under its key, still uncertain as its answer went missing", async () => {
    const s = await open();
    const a = await s.begin();
    await a.append(intent('acme.com', { at: 1_000 }), true);
    await a.append({ type: 'enrich', company: 'acme.com', generation: 1, keyVersion: 1, status: 'error', code: 'network_error', verdict: 'kept', lost: true, at: 2_000 });
    await a.flush();
    // Run a ran on another machine whose heartbeat stopped a lease ago.
    await s.raw("UPDATE runs SET host = 'container-a1b2', heartbeat_at = ? WHERE id = ?", Date.now() - LEASE_MS - 5_000, a.runId);
    const b = await s.begin();
    expect(await b.append(intent('acme.com', { at: 3_000 }), true)).toStrictEqual({ kind: 'ok', tookOver: true });
    expect((await b.companyState('acme.com')).purchase).toMatchObject({ intentKey: 'k-acme.com', uncertain: true, lostAt: 3_000 });
    // A claim taken again by its own run is no takeover.
    expect(await b.append(intent('acme.com'), true)).toStrictEqual({ kind: 'ok' });
  });

  it('lets a live run release a purchase it could not finish, and all its claims at the end', async () => {
    const s = await open();
    const a = await s.begin();
    const b = await s.begin();
    await a.append(intent('acme.com'), true);
    await a.append(intent('beta.com'), true);
    expect((await b.append(intent('acme.com'), true)).kind).toBe('busy');
    await a.append({ type: 'release', company: 'acme.com', generation: 1 });
    await a.flush();
    expect(await b.append(intent('acme.com'), true)).toStrictEqual({ kind: 'ok', tookOver: true });
    // A release by a run that no longer owns it changes nothing.
    await a.append({ type: 'release', company: 'acme.com', generation: 1 });
    await a.flush();
    expect((await s.raw("SELECT owner_run FROM purchases WHERE domain = 'acme.com'")).map((r) => Number(r['owner_run']))).toStrictEqual([b.runId]);
    expect((await b.append(intent('beta.com'), true)).kind).toBe('busy');
    await a.releaseClaims();
    await a.endRun({ status: 'done', credits: 3, bought: 2, reused: 1 });
    expect(await b.append(intent('beta.com'), true)).toStrictEqual({ kind: 'ok', tookOver: true });
    expect((await s.raw('SELECT status, credits, bought, reused, ended_at IS NOT NULL AS ended FROM runs WHERE id = ?', a.runId)).map((r) => [r['status'], Number(r['credits']), Number(r['bought']), Number(r['reused']), Boolean(r['ended'])])).toStrictEqual([['done', 3, 2, 1, true]]);
  });

  it('gives back its own unsent claim only, and retires only the key it sent under', async () => {
    const s = await open();
    const a = await s.begin();
    await a.append(intent('acme.com'), true);
    await a.append({ type: 'unclaim', company: 'acme.com', generation: 1, keyVersion: 1, key: 'k-acme.com' });
    await a.append(intent('beta.com'), true);
    await a.flush();
    expect((await a.companyState('acme.com')).purchase).toMatchObject({ intentKey: null, outcome: 'open', lostAt: null });
    const b = await s.begin();
    expect(await b.append(intent('acme.com'), true)).toStrictEqual({ kind: 'ok' });
    // Taken over by b (a's lease lapsed on another host): a's late retire and unclaim change nothing.
    await s.raw("UPDATE purchases SET owner_run = ? WHERE domain = 'beta.com'", b.runId);
    await a.append({ type: 'enrich', company: 'beta.com', generation: 1, keyVersion: 1, status: 'error', code: 'internal', verdict: 'retired' });
    await a.append({ type: 'unclaim', company: 'beta.com', generation: 1, keyVersion: 1, key: 'k-beta.com' });
    await a.flush();
    expect((await b.companyState('beta.com')).purchase).toMatchObject({ keyVersion: 1, intentKey: 'k-beta.com' });
    // Its own key it retires: the next attempt takes version 2.
    await b.append({ type: 'enrich', company: 'beta.com', generation: 1, keyVersion: 1, status: 'error', code: 'internal', verdict: 'retired' });
    await b.flush();
    expect((await b.companyState('beta.com')).purchase).toMatchObject({ keyVersion: 2, intentKey: null, unconfirmed: 0 });
  });

  it('never lets an older generation replace a newer record; closes a final error as failed', async () => {
    const s = await open();
    const a = await s.begin();
    await a.append(hit('acme.com', 2));
    await a.append({ ...hit('acme.com', 1), record: record('acme.com', 'Old') } as StoreEvent);
    await a.append(intent('bad.com'), true);
    await a.append({ type: 'enrich', company: 'bad.com', generation: 1, keyVersion: 1, status: 'error', code: 'validation_error', final: true });
    await a.flush();
    expect((await a.records(['acme.com'])).get('acme.com')?.name).toBe('acme.com');
    expect((await a.companyState('acme.com')).held?.generation).toBe(2);
    expect((await a.companyState('bad.com')).purchase).toMatchObject({ outcome: 'failed', errorCode: 'validation_error', intentKey: null });
  });

  it('derives keys from the epoch of a prune that committed between the open and the run', async () => {
    const s = await open();
    const first = await s.begin();
    await first.append(intent('old.com'), true);
    await first.append(hit('old.com', 1, 1_000));
    await first.flush();
    await first.endRun({ status: 'done', credits: 1, bought: 1, reused: 0 });
    await first.close();
    const before = first.storeId;
    expect(before).not.toContain('.');
    const begin = await s.opening();
    // Between the open and the run: a prune forgets the old purchase, so generation 1 may be bought again.
    const ledger = await openLedgerStore(s.address, { tool: 'test', now: Date.now, env: {}, write: true, create: false });
    try {
      expect(await ledger.prune(2_000, false)).toMatchObject({ purchases: 1 });
    } finally {
      await ledger.close();
    }
    const run = await begin();
    // Under the old id it would send old.com's first key again, and be answered with the replay.
    expect(run.storeId).toBe(`${before}.1`);
  });

  it('keeps services apart: what one service bought is nothing to another', async () => {
    const s = await open();
    const a = await s.begin();
    await a.append({ type: 'match', domain: 'acme.com', status: 'hit', company: 'acme.com', name: 'Acme' });
    expect(await a.append(intent('acme.com'), true)).toStrictEqual({ kind: 'ok' });
    await a.append(hit('acme.com'));
    await a.flush();
    const other = await s.begin('other-service');
    expect(await other.holdsAny()).toBe(false);
    expect((await other.companyState('acme.com')).held).toBeNull();
    expect(await other.append(intent('acme.com'), true)).toStrictEqual({ kind: 'ok' });
  });

  it("lists the service's other runs under way, then by id: one begun since, and no longer one that ended", async () => {
    const s = await open();
    const a = await s.begin();
    const b = await s.begin();
    const elsewhere = await s.begin('other-service');
    const first = await a.otherRuns([], null);
    expect(first).toStrictEqual({ under: [b.runId], last: elsewhere.runId });
    expect((await elsewhere.otherRuns([], null)).under).toStrictEqual([]);
    const c = await s.begin();
    await b.endRun({ status: 'done', credits: 0, bought: 0, reused: 0 });
    expect(await a.otherRuns(first.under, first.last)).toStrictEqual({ under: [c.runId], last: c.runId });
    // Only what is asked for is read: a run neither known nor newer is not listed.
    expect(await a.otherRuns([], c.runId)).toStrictEqual({ under: [], last: c.runId });
  });

  it("keeps a job's freshness moment for its rerun after it was cut short, and only for that", async () => {
    const s = await open();
    const job = { max_age_ms: 0 };
    // Each run begins a few ms after the one before, and its row says which moment it judges freshness at: its start, or a job's.
    const begin = async (options: Record<string, unknown>): Promise<ServiceStore> => {
      await new Promise((resolve) => setTimeout(resolve, 5));
      return s.begin('svc', options);
    };
    const moment = async (run: ServiceStore): Promise<'its start' | number> => {
      const [r] = await s.raw('SELECT policy_now, started_at FROM runs WHERE id = ?', run.runId);
      return Number(r?.['policy_now']) === Number(r?.['started_at']) ? 'its start' : Number(r?.['policy_now']);
    };
    const end = (run: ServiceStore, status: string): Promise<void> => run.endRun({ status, credits: 0, bought: 0, reused: 0 });
    const first = await begin(job);
    await end(first, 'interrupted');
    const resumed = await begin(job);
    expect(await moment(resumed)).toBe(first.policyNow);
    await end(resumed, 'done');
    // Finished, or another --max-age: a new job.
    const next = await begin(job);
    expect(await moment(next)).toBe('its start');
    await end(next, 'stopped');
    const other = await begin({ max_age_ms: 5 });
    expect(await moment(other)).toBe('its start');
    await end(other, 'done');
    // A run with no --max-age cut short is no job a --fresh rerun (--max-age 0) continues.
    await end(await begin({ max_age_ms: null }), 'interrupted');
    expect(await moment(await begin(job))).toBe('its start');
  });

  it("keeps a killed job's freshness moment for a rerun at once on its host, its heartbeat still fresh", async () => {
    const s = await open();
    const job = { max_age_ms: 7 * 24 * 3600_000 };
    const killed = await s.begin('svc', job);
    // As kill -9 leaves it on this host: marked running, beating within its lease, its process gone.
    const gone = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))']).stdout.toString();
    await s.raw('UPDATE runs SET pid = ? WHERE id = ?', Number(gone), killed.runId);
    await new Promise((resolve) => setTimeout(resolve, 5));
    // Before: the team store took it for alive by its heartbeat, judged the rerun from now and bought its fresh records again.
    expect((await s.begin('svc', job)).policyNow).toBe(killed.policyNow);
    // Nor does the ledger show it as under way.
    const ledger = await openLedgerStore(s.address, { tool: 'test', env: {}, write: false, create: false });
    try {
      // One person's store does not judge (it says "running or killed" of any run under way); the team's says it is gone.
      expect((await ledger.runs(10)).find((r) => r.id === killed.runId)?.status).toMatch(backend === sqlite ? /^running or killed$/ : /^gone/);
    } finally {
      await ledger.close();
    }
  });

  it("counts a purchase a copy closes under the cap of the person whose run held it open", async () => {
    const s = await open();
    await (await s.begin()).endRun({ status: 'done', credits: 0, bought: 0, reused: 0 });
    const [service] = await s.raw("SELECT id FROM services WHERE name = 'svc'");
    await s.raw("INSERT INTO purchases (service, domain, generation, key_version, intent_key, outcome, opened_at, person, reserved) VALUES (?, 'acme.com', 1, 1, 'k1', 'open', 1000, 'alice', 1)", service?.['id']);
    // A laptop's store, where the same purchase closed with its record.
    const dir = tempDir();
    const laptop = Store.open(join(dir.path, 'laptop.db'), { tool: 'test' });
    laptop.db.exec("INSERT INTO services (name) VALUES ('svc'); INSERT INTO purchases (service, domain, generation, key_version, outcome, credits, opened_at, closed_at) VALUES (1, 'acme.com', 1, 1, 'hit', 1, 1000, 2000)");
    laptop.close();
    const copied = await copyUnderCap(join(dir.path, 'laptop.db'), s, 'alice', 10, () => 3000).finally(() => dir.cleanup());
    // A copy holds a session lock, which a transaction pooler does not keep: it is refused there, in one line (team-pooler.test).
    if (backend === pooled) return void expect(copied).toBeNull();
    expect(copied?.copied).toMatchObject({ closed: 1, credits: 1 });
    // Before, on SQLite: the row was replaced whole, and alice's cap no longer counted it.
    const { store, people } = copied?.budget ?? { store: { spent: 0 }, people: [] };
    expect(store.spent).toBeGreaterThan(0);
    expect(people).toStrictEqual([expect.objectContaining({ person: 'alice', spent: store.spent })]);
  });

  it("dates a 0.1 journal's lookups and purchases at the journal's time, not the import's", async () => {
    const s = await open();
    const then = Date.parse('2024-01-05T10:00:00Z');
    const dir = tempDir();
    const path = join(dir.path, 'in.csv.enrich-journal');
    const lines = [
      { t: 'header', format: 1, run: 'r', created: new Date(then).toISOString(), tool: 't', input: { sha256: 'x', bytes: 1, name: 'in.csv' }, column: 'domain', service: 'svc' },
      { t: 'session', n: 1, at: new Date(then).toISOString(), pid: 1, dry_run: false },
      { t: 'match', d: 'nothing.com', s: 'miss' },
      { t: 'match', d: 'acme.com', s: 'hit', c: 'acme.com', n: 'Acme' },
      { t: 'intent', c: 'acme.com', v: 1, key: 'key-acme' },
    ];
    writeFileSync(path, lines.map((l) => `${JSON.stringify(l)}\n`).join(''));
    const ledger = await openLedgerStore(s.address, { tool: 'test', env: {}, write: true, create: true });
    try {
      await importJournal(ledger, path);
    } finally {
      await ledger.close();
      dir.cleanup();
    }
    // Before, on the team store: both at the import's time, so an old miss was taken for a fresh one and never asked again.
    expect((await s.raw('SELECT checked_at FROM lookups ORDER BY domain')).map((r) => Number(r['checked_at']))).toStrictEqual([then, then]);
    expect((await s.raw('SELECT opened_at FROM purchases')).map((r) => Number(r['opened_at']))).toStrictEqual([then]);
  });

  it("keeps a newer lookup and record over an imported 0.1 journal's older ones", async () => {
    const s = await open();
    const a = await s.begin();
    await a.append({ type: 'match', domain: 'acme.com', status: 'hit', company: 'acme.com', name: 'Acme' });
    await a.append(intent('acme.com'));
    const bought = Date.now();
    await a.append(hit('acme.com', 1, bought));
    await a.flush();
    await a.endRun({ status: 'done', credits: 1, bought: 1, reused: 0 });
    await a.close();
    const dir = tempDir();
    await importJournalAt(s.address, join(dir.path, 'in.csv.enrich-journal'), THEN, [
      { t: 'match', d: 'acme.com', s: 'miss' },
      { t: 'intent', c: 'acme.com', v: 1, key: 'key-acme' },
      { t: 'enrich', c: 'acme.com', v: 1, s: 'hit', charged: 1, company: record('acme.com', 'Acme in 2024') },
    ]);
    dir.cleanup();
    // Before, on both stores: the journal's record and miss replaced them, so the company read as bought in 2024 (bought again under --max-age).
    expect((await s.raw('SELECT status, checked_at FROM lookups')).map((r) => [r['status'], Number(r['checked_at']) > THEN])).toStrictEqual([['hit', true]]);
    expect((await s.raw('SELECT name, bought_at FROM companies')).map((r) => [r['name'], Number(r['bought_at'])])).toStrictEqual([['acme.com', bought]]);
  });

  it("leaves a live run's purchase under its own key to it when a journal names the company", async () => {
    const s = await open();
    const a = await s.begin();
    expect(await a.append(intent('acme.com'), true)).toStrictEqual({ kind: 'ok' });
    const dir = tempDir();
    await importJournalAt(s.address, join(dir.path, 'in.csv.enrich-journal'), THEN, [
      { t: 'intent', c: 'acme.com', v: 1, key: 'key-acme' },
      { t: 'enrich', c: 'acme.com', v: 1, s: 'hit', charged: 1, company: record('acme.com') },
    ]);
    dir.cleanup();
    await a.append(hit('acme.com'));
    await a.flush();
    // Before: the import closed the run's purchase as of 2024, and the credit the run was charged now counted in no month.
    expect((await s.raw('SELECT run, credits FROM purchases')).map((r) => [Number(r['run']), Number(r['credits'])])).toStrictEqual([[a.runId, 1]]);
    expect((await a.creditsSince(Date.now() - 60_000)).charged).toBe(1);
  });

  it("never gives up or closes a dead run's possibly charged key on a journal's answer under another key", async () => {
    const s = await open();
    for (const [company, line] of [
      ['acme.com', { s: 'error', code: 'internal', key: 'retired' }],
      ['bolt.io', { s: 'miss', charged: 0 }],
      ['crux.dev', { s: 'error', code: 'validation_error', final: true }],
    ] as const) {
      const a = await s.begin();
      expect(await a.append(intent(company), true)).toStrictEqual({ kind: 'ok' });
      await a.append({ type: 'enrich', company, generation: 1, keyVersion: 1, status: 'error', code: 'network_error', verdict: 'kept', lost: true, settleMs: 600_000 });
      await a.flush();
      await a.endRun({ status: 'interrupted', credits: 0, bought: 0, reused: 0 });
      await a.releaseClaims();
      await a.close();
      const dir = tempDir();
      await importJournalAt(s.address, join(dir.path, `${company}.enrich-journal`), THEN, [{ t: 'intent', c: company, v: 1, key: `key-${company}` }, { t: 'enrich', c: company, v: 1, ...line }]);
      dir.cleanup();
    }
    // Before: retired (the next run bought under a new key), or closed as a miss or a failure, the possible charge counted nowhere.
    const rows = await s.raw('SELECT domain, key_version, intent_key, uncertain, outcome FROM purchases ORDER BY domain');
    expect(rows.map((r) => [r['domain'], Number(r['key_version']), r['intent_key'], Number(r['uncertain']), r['outcome']])).toStrictEqual(
      ['acme.com', 'bolt.io', 'crux.dev'].map((c) => [c, 1, `k-${c}`, 1, 'open']),
    );
  });

  it("closes a dead run's purchase on a journal's hit, its own key then counted as possibly charged", async () => {
    const s = await open();
    const dir = tempDir();
    const path = join(dir.path, 'in.csv.enrich-journal');
    // acme: the journal's open purchase, taken up under its key by a run since killed; bolt: a killed run's lost answer under its own key.
    await importJournalAt(s.address, path, THEN, [{ t: 'intent', c: 'acme.com', v: 1, key: 'key-acme' }]);
    const a = await s.begin();
    expect(await a.append(intent('acme.com', { key: 'key-acme' }), true)).toMatchObject({ kind: 'ok' });
    expect(await a.append(intent('bolt.io'), true)).toStrictEqual({ kind: 'ok' });
    await a.append({ type: 'enrich', company: 'bolt.io', generation: 1, keyVersion: 1, status: 'error', code: 'network_error', verdict: 'kept', lost: true, settleMs: 600_000 });
    await a.flush();
    await s.raw("UPDATE runs SET host = 'gone-host', heartbeat_at = ? WHERE id = ?", Date.now() - LEASE_MS - 5_000, a.runId);
    const bought = (c: string): object => ({ t: 'enrich', c, v: 1, s: 'hit', charged: 1, company: record(c) });
    writeFileSync(path, `${[bought('acme.com'), { t: 'intent', c: 'bolt.io', v: 1, key: 'key-bolt' }, bought('bolt.io')].map((l) => JSON.stringify(l)).join('\n')}\n`, { flag: 'a' });
    const ledger = await openLedgerStore(s.address, { tool: 'test', env: {}, write: true, create: false });
    await importJournal(ledger, path).finally(() => ledger.close());
    dir.cleanup();
    // Before: both stayed open for ever beside the journal's record, a price held under the caps every month.
    const rows = await s.raw('SELECT domain, outcome, credits, unconfirmed FROM purchases ORDER BY domain');
    expect(rows.map((r) => [r['domain'], r['outcome'], Number(r['credits']), Number(r['unconfirmed'])])).toStrictEqual([['acme.com', 'hit', 1, 0], ['bolt.io', 'hit', 1, 1]]);
    const b = await s.begin();
    expect(await b.append(intent('acme.com', { freshSince: null }), true)).toMatchObject({ kind: 'held' });
  });

  it('reads a journal an older version imported once more, changing nothing a run or the first read wrote', async () => {
    const s = await open();
    const dir = tempDir();
    const path = join(dir.path, 'in.csv.enrich-journal');
    await importJournalAt(s.address, path, THEN, [
      { t: 'match', d: 'acme.com', s: 'hit', c: 'acme.com', n: 'Acme' },
      { t: 'intent', c: 'acme.com', v: 1, key: 'key-acme' },
      { t: 'enrich', c: 'acme.com', v: 1, s: 'error', code: 'internal', key: 'kept' },
      { t: 'intent', c: 'bolt.io', v: 1, key: 'key-bolt' },
      { t: 'enrich', c: 'bolt.io', v: 1, s: 'error', code: 'internal', key: 'kept' },
    ]);
    // As an older version left it: known by its path alone.
    await s.raw(`UPDATE imports SET path = replace(path, ' r${THEN}', '')`);
    // Since: a run resumed acme's key and was told it was never charged; bolt's key was given up by `ledger release`.
    const a = await s.begin();
    expect(await a.append(intent('acme.com', { key: 'key-acme' }), true)).toMatchObject({ kind: 'ok' });
    await a.append({ type: 'enrich', company: 'acme.com', generation: 1, keyVersion: 1, status: 'error', code: 'validation_error', verdict: 'retired' });
    await a.append({ type: 'match', domain: 'acme.com', status: 'miss' });
    await a.flush();
    await a.endRun({ status: 'done', credits: 0, bought: 0, reused: 0 });
    await a.close();
    const ledger = await openLedgerStore(s.address, { tool: 'test', env: {}, write: true, create: false });
    try {
      await ledger.release(await ledger.atRisk(['bolt.io']));
      await ledger.setBudget(null, 1, 'test');
      const dump = async (): Promise<unknown> => [
        await s.raw('SELECT domain, key_version, intent_key, uncertain, unconfirmed, error_code, outcome, credits FROM purchases ORDER BY domain'),
        await s.raw('SELECT domain, status, checked_at FROM lookups ORDER BY domain'),
      ];
      const before = await dump();
      expect(await importJournal(ledger, path)).not.toBeNull();
      // Before: the journal's "kept" marked both keys given up since as possibly charged, and a run bought past the cap on it.
      expect(await dump()).toStrictEqual(before);
    } finally {
      await ledger.close();
      dir.cleanup();
    }
    const b = await s.begin();
    expect(await b.append(intent('bolt.io', { keyVersion: 2, key: 'k2-bolt' }), true)).toMatchObject({ kind: 'capped' });
  });

  it('refuses a key derived before a prune to a run paused past it, and lets a key already stored go on', async () => {
    const s = await open();
    // Run a's machine sleeps past its lease; meanwhile the store is pruned, which moves the key epoch on.
    let a: ServiceStore | undefined;
    const kOld = await prunedWithOpen(s, async () => {
      a = await s.begin();
      await s.raw("UPDATE runs SET host = 'laptop-a', heartbeat_at = ? WHERE id = ?", Date.now() - LEASE_MS - 5_000, a.runId);
    });
    if (a === undefined) throw new Error('run a did not begin');
    // Before: a went on under keys of the old epoch (the service replays their old answers) and generations planned before the
    // prune (beside another run buying the company anew: both charged).
    expect(await a.append(intent('new.com', { key: idempotencyKey(a.storeId, 'new.com', 1, 1) }), true)).toStrictEqual({ kind: 'pruned' });
    // A stored key may have been charged: only it recovers that charge free, whoever resumes it.
    expect(await a.append(intent('open.com', { key: kOld }), true)).toMatchObject({ kind: 'ok' });
    const b = await s.begin();
    expect(b.storeId).not.toBe(a.storeId);
    expect(await b.append(intent('new.com', { key: idempotencyKey(b.storeId, 'new.com', 1, 1) }), true)).toStrictEqual({ kind: 'ok' });
  });

  /** open.com left open (key of epoch 0, released), old.com closed and pruned (after `beforePrune`): the key epoch moved on. */
  async function prunedWithOpen(s: Opened, beforePrune: () => Promise<void> = async () => {}): Promise<string> {
    const first = await s.begin();
    for (const c of ['old.com', 'open.com']) expect(await first.append(intent(c, { key: idempotencyKey(first.storeId, c, 1, 1) }), true)).toStrictEqual({ kind: 'ok' });
    await first.append(hit('old.com', 1, 1_000));
    await first.flush();
    await first.endRun({ status: 'interrupted', credits: 1, bought: 1, reused: 0 });
    await first.releaseClaims();
    await first.close();
    await beforePrune();
    const ledger = await openLedgerStore(s.address, { tool: 'test', env: {}, write: true, create: false });
    try {
      expect(await ledger.prune(2_000, false)).toMatchObject({ purchases: 1 });
    } finally {
      await ledger.close();
    }
    return idempotencyKey(first.storeId, 'open.com', 1, 1);
  }

  it('lets runs begun after a prune take a key stored before it over from each other: moved, not pruned', async () => {
    const s = await open();
    const kOld = await prunedWithOpen(s);
    expect(await secondClaim(s, kOld, 'miss')).toBe('moved');
  });

  it('keeps a key stored before a prune busy for a live run that holds it, not pruned', async () => {
    const s = await open();
    const kOld = await prunedWithOpen(s);
    expect(await secondClaim(s, kOld, 'retired')).toBe('busy');
  });

  it('lets a run take over a copied purchase under the other store\'s key: moved, not pruned', async () => {
    const s = await open();
    const src = tempDir();
    const from = join(src.path, 'personal.db');
    const personal = Store.open(from, { tool: 'test' });
    const first = personal.beginRun('svc', info);
    const foreign = idempotencyKey(first.storeId, 'open.com', 1, 1);
    expect(await first.append(intent('open.com', { key: foreign }), true)).toStrictEqual({ kind: 'ok' });
    await first.flush();
    await first.endRun({ status: 'interrupted', credits: 0, bought: 0, reused: 0 });
    await first.releaseClaims();
    await first.close();
    personal.close();
    const pre = await s.begin();
    await pre.endRun({ status: 'done', credits: 0, bought: 0, reused: 0 });
    await pre.close();
    const copied = await copyUnderCap(from, s, 'someone', 100);
    src.cleanup();
    // A pooler refuses a copy (above).
    if (backend === pooled) return void expect(copied).toBeNull();
    expect(await secondClaim(s, foreign, 'miss')).toBe('moved');
  });

  it("keeps a dead run's possible charge in its own month when a journal's hit closes its purchase", async () => {
    const s = await open();
    const a = await s.begin();
    expect(await a.append(intent('bolt.io', { key: idempotencyKey(a.storeId, 'bolt.io', 1, 1) }), true)).toStrictEqual({ kind: 'ok' });
    await a.append({ type: 'enrich', company: 'bolt.io', generation: 1, keyVersion: 1, status: 'error', code: 'network_error', verdict: 'kept', lost: true, settleMs: 600_000, at: Date.now() });
    await a.flush();
    await s.raw("UPDATE runs SET host = 'gone-host', heartbeat_at = ? WHERE id = ?", Date.now() - LEASE_MS - 5_000, a.runId);
    const ledger = await openLedgerStore(s.address, { tool: 'test', env: {}, write: true, create: false });
    await ledger.setBudget(null, 1, 'test');
    await ledger.close();
    // Before the import: the cap's one credit is held by bolt's possibly charged key.
    expect(await newClaim(s)).toBe('capped');
    await importBoltBought(s.address);
    // The key a run sent this month may have been charged: it must still count this month.
    expect(await newClaim(s)).toBe('capped');
  });

  it("keeps keys given up as possibly charged this month when a journal's hit closes their purchase", async () => {
    const s = await open();
    const a = await s.begin();
    expect(await a.append(intent('bolt.io', { key: idempotencyKey(a.storeId, 'bolt.io', 1, 1) }), true)).toStrictEqual({ kind: 'ok' });
    // Given up as possibly charged: the next key is version 2, the first counted unconfirmed this month.
    await a.append({ type: 'enrich', company: 'bolt.io', generation: 1, keyVersion: 1, status: 'error', code: 'internal', verdict: 'retired', unconfirmed: true, at: Date.now() });
    await a.flush();
    await a.endRun({ status: 'done', credits: 0, bought: 0, reused: 0 });
    await a.close();
    // The purchase was opened months before (an earlier key, given up free).
    await s.raw('UPDATE purchases SET opened_at = ?', THEN + 1_000);
    const ledger = await openLedgerStore(s.address, { tool: 'test', env: {}, write: true, create: false });
    await ledger.setBudget(null, 1, 'test').finally(() => ledger.close());
    await importBoltBought(s.address);
    // Before: closed in 2024, the possible charge left this month's cap, and a run bought past it.
    expect(await newClaim(s)).toBe('capped');
  });

  it("applies a keyless journal's answers to its own keyless purchase", async () => {
    const s = await open();
    const dir = tempDir();
    await importJournalAt(s.address, join(dir.path, 'in.csv.enrich-journal'), THEN, [
      { t: 'enrich', c: 'acme.com', v: 1, s: 'error', code: 'network_error', key: 'kept' },
      { t: 'enrich', c: 'acme.com', v: 1, s: 'miss', charged: 0 },
      { t: 'enrich', c: 'bolt.io', v: 1, s: 'error', code: 'network_error', key: 'kept' },
      { t: 'enrich', c: 'bolt.io', v: 1, s: 'hit', charged: 1, company: record('bolt.io') },
    ]);
    dir.cleanup();
    const rows = await s.raw('SELECT domain, outcome, uncertain, credits, unconfirmed FROM purchases ORDER BY domain');
    expect(rows.map((r) => [r['domain'], r['outcome'], Number(r['unconfirmed'])])).toStrictEqual([['acme.com', 'miss', 0], ['bolt.io', 'hit', 0]]);
  });

  it("keeps a journal's record beside a live run's purchase: reused if the run's key proves uncharged", async () => {
    const s = await open();
    const a = await s.begin();
    expect(await a.append(intent('acme.com', { key: idempotencyKey(a.storeId, 'acme.com', 1, 1) }), true)).toStrictEqual({ kind: 'ok' });
    await a.flush();
    const dir = tempDir();
    const path = join(dir.path, 'in.csv.enrich-journal');
    await importJournalAt(s.address, path, THEN, [
      { t: 'intent', c: 'acme.com', v: 1, key: 'key-acme' },
      { t: 'enrich', c: 'acme.com', v: 1, s: 'hit', charged: 1, company: record('acme.com') },
    ]);
    // The live run's key is then proven uncharged (retired): the next key buys what the journal had bought.
    await a.append({ type: 'enrich', company: 'acme.com', generation: 1, keyVersion: 1, status: 'error', code: 'internal', verdict: 'retired', at: Date.now() });
    await a.flush();
    const ledger = await openLedgerStore(s.address, { tool: 'test', env: {}, write: true, create: false });
    expect(await importJournal(ledger, path)).toBeNull();
    await ledger.close();
    dir.cleanup();
    const got = await a.append(intent('acme.com', { keyVersion: 2, key: idempotencyKey(a.storeId, 'acme.com', 1, 2), freshSince: null }), true);
    expect(got.kind).toBe('held');
  });

  // The team store's batch in statements, a prune committed between two of them (raceProbe); direct only, as a pooler adds nothing here.
  if (backend === postgres) {
    it('refuses a claim whose batch read the purchases after a prune committed (team store)', async () => {
      await raceProbe(await open(), 'purchases p LEFT JOIN runs o');
    });
    it('refuses a claim whose batch a prune committed between the reads and the writes (team store)', async () => {
      await raceProbe(await open(), 'pg_advisory_xact_lock_shared', 'new.com');
    });
    it("prunes beside a run's batch that holds a row it forgets, whichever the server ends for the deadlock (team store)", async () => {
      await raceProbe(await open(), 'pg_advisory_xact_lock_shared', 'new.com', true);
    });
  }

  it("imports a new journal 0.1's --fresh started where an imported one was", async () => {
    const s = await open();
    const dir = tempDir();
    const path = join(dir.path, 'in.csv.enrich-journal');
    const bought = (c: string): object[] => [{ t: 'intent', c, v: 1, key: `key-${c}` }, { t: 'enrich', c, v: 1, s: 'hit', charged: 1, company: record(c) }];
    expect(await importJournalAt(s.address, path, THEN, [...bought('acme.com'), ...bought('bolt.io')])).toMatchObject({ companies: 2 });
    // Before: skipped, as the path's bytes were imported already, and new.com was bought again.
    expect(await importJournalAt(s.address, path, THEN + 86_400_000, bought('new.com'))).toMatchObject({ companies: 1 });
    expect(await importJournalAt(s.address, path, THEN + 86_400_000, bought('new.com'))).toBeNull();
    dir.cleanup();
    expect((await s.raw('SELECT domain FROM companies ORDER BY domain')).map((r) => r['domain'])).toStrictEqual(['acme.com', 'bolt.io', 'new.com']);
  });

  it("keeps a journal's newest lookup of a domain, whatever order its sessions came in, and a run's over any", async () => {
    const s = await open();
    const dir = tempDir();
    await importJournalAt(s.address, join(dir.path, 'in.csv.enrich-journal'), THEN + 3_600_000, [
      { t: 'match', d: 'x.com', s: 'miss' },
      { t: 'session', n: 2, at: new Date(THEN).toISOString(), pid: 2, dry_run: false },
      { t: 'match', d: 'x.com', s: 'hit', c: 'x.com', n: 'X' },
    ]);
    dir.cleanup();
    // Before, on the team store: the journal's last line won, an hour older than its first.
    expect((await s.raw('SELECT status, checked_at FROM lookups')).map((r) => [r['status'], Number(r['checked_at'])])).toStrictEqual([['miss', THEN + 3_600_000]]);
    // A lookup dated ahead (a copy from a clock that was fast) is still replaced by a run's answer: the newest there is.
    await s.raw('UPDATE lookups SET checked_at = ?', Date.now() + 3_600_000);
    const a = await s.begin();
    await a.append({ type: 'match', domain: 'x.com', status: 'hit', company: 'x.com', name: 'X' });
    await a.flush();
    expect((await s.raw('SELECT status FROM lookups')).map((r) => r['status'])).toStrictEqual(['hit']);
  });

  it("counts what a copy adds under the cap of the person who bought it", async () => {
    const s = await open();
    await (await s.begin()).endRun({ status: 'done', credits: 0, bought: 0, reused: 0 });
    const dir = tempDir();
    const laptopPath = join(dir.path, 'laptop.db');
    const laptop = Store.open(laptopPath, { tool: 'test', user: 'ana' });
    const run = laptop.beginRun('svc', info);
    for (const c of ['a.com', 'b.com']) {
      expect(await run.append(intent(c), true)).toStrictEqual({ kind: 'ok' });
      await run.append(hit(c));
    }
    await run.endRun({ status: 'done', credits: 2, bought: 2, reused: 0 });
    await run.close();
    laptop.close();
    const copied = await copyUnderCap(laptopPath, s, 'ana', 2).finally(() => dir.cleanup());
    if (backend === pooled) return void expect(copied).toBeNull();
    expect(copied?.copied).toMatchObject({ closed: 2, credits: 2 });
    // Before: the copied purchases had no person, and ana's cap counted none of them.
    expect(copied?.budget.people).toStrictEqual([expect.objectContaining({ person: 'ana', spent: 2 })]);
  });

  it('reads every row for a copy, page after page in byte order, a purchase page ending inside a domain', async () => {
    const s = await open();
    await s.begin();
    // 1,201 domains, more than a page of lookups, in an order a collation ignoring punctuation changes (a-1000.com
    // before a-10.com; test/helpers/postgres.ts); three generations each, so a page of purchases (1,000) ends inside a domain.
    const count = `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 1200)`;
    const domain = `CASE WHEN i % 2 = 0 THEN 'a-' ELSE 'ab' END || CAST(i AS text) || '.com'`;
    await s.raw(`INSERT INTO lookups (service, domain, status, checked_at) ${count} SELECT 1, ${domain}, 'miss', 1 FROM n`);
    await s.raw(`INSERT INTO purchases (service, domain, generation, key_version, outcome, credits, opened_at, closed_at) ${count} SELECT 1, ${domain}, g, 1, 'hit', 1, 1, 2 FROM n, (SELECT 1 AS g UNION ALL SELECT 2 UNION ALL SELECT 3) gs`);
    const ledger = await openLedgerStore(s.address, { tool: 'test', now: Date.now, env: {}, write: false, create: false });
    try {
      const source = await ledger.copySource();
      const lookups: string[] = [];
      for await (const page of source.lookups('svc')) lookups.push(...page.map((l) => l.domain));
      const purchases: string[] = [];
      for await (const page of source.purchases('svc')) purchases.push(...page.map((p) => `${p.domain} ${p.generation}`));
      await source.end();
      const bytes = (a: string, b: string): number => Buffer.compare(Buffer.from(a), Buffer.from(b));
      expect(lookups).toHaveLength(1_201);
      expect(lookups).toStrictEqual([...lookups].sort(bytes));
      expect(purchases).toStrictEqual(lookups.flatMap((d) => [`${d} 1`, `${d} 2`, `${d} 3`]));
    } finally {
      await ledger.close();
    }
  });

  // The rule is written once (store/purchase.ts decideBatch); the tests' memory store applies it
  // to plain maps. This holds each backend to it: what it reads and writes in its transaction.
  // Two runs, a seeded sequence: claims, answers, losses, retirements, releases, unclaims.
  // One seed a backend, a different one each: PostgreSQL's SQL (direct and pooled) meets two sequences.
  const seed = backends.indexOf(backend) + 1;
  it(`writes what the purchase rule in memory decides, event by event (seed ${seed})`, async () => {
    const s = await open();
    const runs = [await s.begin(), await s.begin()] as const;
    const memory = new MemoryStore();
    const rule = [memory.beginRun(), memory.beginRun()] as const;
    const states = async (run: ServiceStore): Promise<Record<string, CompanyState>> => {
      const out: Record<string, CompanyState> = {};
      await run.loadCompanies(COMPANIES, (domain, state) => (out[domain] = state));
      return out;
    };
    const claimOf = (c: Claim): unknown => (c.kind === 'busy' ? { kind: 'busy' } : c);
    for (const [i, { run, event }] of steps(seed, 120).entries()) {
      const seen = [];
      for (const target of [runs[run], rule[run]]) {
        const claim = await target.append(event, event.type === 'intent');
        await target.flush();
        seen.push({ claim: claimOf(claim), states: await states(target) });
      }
      expect(seen[0], `step ${i}: run ${run} ${JSON.stringify(event)}`).toStrictEqual(seen[1]);
    }
  });

  // A seeded mix of claims and outcomes under a cap of 3: the same claims and budget lines.
  it(`keeps a cap's room alike for a batch appended at once or event by event (seed ${seed})`, async () => {
    const together = await backend.open();
    try {
      const alone = await open();
      const runs = [await together.begin(), await alone.begin()] as const;
      for (const s of [together, alone]) await s.raw("INSERT INTO budgets (person, credits, set_at) VALUES ('', 3, 0)");
      const lines = async (run: ServiceStore): Promise<unknown> => (await run.budget()).map((l) => [l.person, l.cap, l.spent, l.held, l.left]);
      let capped = 0;
      for (const [i, group] of cappedSteps(seed, 50).entries()) {
        const a = await Promise.all(group.map((e) => runs[0].append(e, e.type === 'intent')));
        await runs[0].flush();
        const b: Claim[] = [];
        for (const e of group) {
          b.push(await runs[1].append(e, e.type === 'intent'));
          await runs[1].flush();
        }
        capped += a.filter((c) => c.kind === 'capped').length;
        // A moved purchase's times are each store's own moments.
        const same = (c: Claim): unknown => (c.kind === 'moved' ? { ...c, purchase: { ...c.purchase, lostAt: null, closedAt: null } } : c);
        expect({ claims: a.map(same), lines: await lines(runs[0]) }, `group ${i}: ${JSON.stringify(group)}`).toStrictEqual({ claims: b.map(same), lines: await lines(runs[1]) });
      }
      // The cap was met, or nothing was proved.
      expect(capped).toBeGreaterThan(5);
    } finally {
      await together.close();
    }
  });

  it("counts a given-up purchase's possible charges under the cap of the person buying it again", async () => {
    const s = await open();
    const bob = await s.begin();
    await s.raw('UPDATE runs SET "user" = ? WHERE id = ?', 'bob', bob.runId);
    expect(await bob.append(intent('p.com'), true)).toStrictEqual({ kind: 'ok' });
    // Retired as possibly charged: key version 2 is next, the first key's charge counted unconfirmed.
    await bob.append({ type: 'enrich', company: 'p.com', generation: 1, keyVersion: 1, status: 'error', code: 'internal', verdict: 'retired', unconfirmed: true });
    await bob.append({ type: 'release', company: 'p.com', generation: 1 });
    await bob.flush();
    const ana = await s.begin();
    await s.raw('UPDATE runs SET "user" = ? WHERE id = ?', 'ana', ana.runId);
    await s.raw("INSERT INTO budgets (person, credits, set_at) VALUES ('ana', 1, 0)");
    // Bought again by ana, it would hold its price and the earlier possible charge under her cap of 1.
    expect(await ana.append(intent('p.com', { keyVersion: 2, key: 'k-p.com-2' }), true)).toStrictEqual({ kind: 'capped', person: 'ana', cap: 1 });
    expect(await ana.append(intent('other.com'), true)).toStrictEqual({ kind: 'ok' });
  });

  it('releases only what is still at risk, leaving one a run finished since it was listed', async () => {
    const s = await open();
    const run = await s.begin();
    for (const c of ['a.com', 'b.com']) {
      await run.append(intent(c), true);
      await run.append({ type: 'enrich', company: c, generation: 1, keyVersion: 1, status: 'error', code: 'network_error', verdict: 'kept', lost: true, settleMs: 600_000 });
    }
    await run.flush();
    await run.endRun({ status: 'interrupted', credits: 0, bought: 0, reused: 0 });
    await run.releaseClaims();
    const ledger = await openLedgerStore(s.address, { tool: 'test', now: Date.now, env: {}, write: true, create: false });
    try {
      const listed = await ledger.atRisk([]);
      expect(listed.map((p) => p.domain).sort()).toStrictEqual(['a.com', 'b.com']);
      // Meanwhile a run got b.com's answer (replayed) and closed its purchase.
      await s.raw("UPDATE purchases SET outcome = 'hit', intent_key = NULL, uncertain = 0, closed_at = 1 WHERE domain = ?", 'b.com');
      expect((await ledger.release(listed)).map((p) => p.domain)).toStrictEqual(['a.com']);
    } finally {
      await ledger.close();
    }
    // Released, the key is retired with its loss and the settle it was lost under.
    const states: Record<string, CompanyState> = {};
    await (await s.begin()).loadCompanies(['a.com'], (d, state) => (states[d] = state));
    expect(states['a.com']?.purchase).toMatchObject({ keyVersion: 2, uncertain: false, lostAt: null, settleMs: null });
  });

  // A run with a 10-minute --timeout dies under its intent; the run taking it over learns that settle.
  it('answers a takeover with the settle the purchase holds, the longer of the two runs\'', async () => {
    const s = await open();
    const a = await s.begin();
    expect(await a.append(intent('a.com', { settleMs: 600_000 }), true)).toStrictEqual({ kind: 'ok', settleMs: 600_000 });
    await a.flush();
    await a.endRun({ status: 'interrupted', credits: 0, bought: 0, reused: 0 });
    await a.releaseClaims();
    const b = await s.begin();
    expect(await b.append(intent('a.com', { settleMs: 60_000 }), true)).toStrictEqual({ kind: 'ok', tookOver: true, settleMs: 600_000 });
  });

  // Issue 36: --all releases a key only once a later run took it up again and got no answer either.
  it('counts a lost key as tried only once a later run resumed it', async () => {
    const s = await open();
    const tried = async (): Promise<boolean[]> => {
      const ledger = await openLedgerStore(s.address, { tool: 'test', now: Date.now, env: {}, write: false, create: false });
      try {
        return (await ledger.atRisk([])).map((p) => p.tried);
      } finally {
        await ledger.close();
      }
    };
    for (const expected of [[false], [true]]) {
      const run = await s.begin();
      await run.append(intent('a.com'), true);
      await run.append({ type: 'enrich', company: 'a.com', generation: 1, keyVersion: 1, status: 'error', code: 'network_error', verdict: 'kept', lost: true });
      await run.flush();
      await run.endRun({ status: 'partial', credits: 0, bought: 0, reused: 0 });
      await run.releaseClaims();
      expect(await tried()).toStrictEqual(expected);
    }
  });

  it('refuses a prune beside a run that has begun', async () => {
    const s = await open();
    const run = await s.begin();
    const ledger = await openLedgerStore(s.address, { tool: 'test', now: Date.now, env: {}, write: true, create: false });
    try {
      await expect(ledger.prune(Date.now(), false)).rejects.toThrow(/a run is under way on this store/);
    } finally {
      await ledger.close();
    }
    expect(run.storeId).not.toContain('.');
  });

  it('counts an outcome written twice (a batch sent again after a lost connection) once', async () => {
    const s = await open();
    const a = await s.begin();
    await a.append(intent('acme.com'), true);
    await a.append(hit('acme.com', 1, 1_700_000_000_000));
    await a.flush();
    await a.append(hit('acme.com', 1, 1_700_000_000_000));
    await a.flush();
    expect(await a.creditsSince(0)).toStrictEqual({ charged: 1, unconfirmed: 0 });
    expect((await a.companyState('acme.com')).purchase).toMatchObject({ outcome: 'hit', closedAt: 1_700_000_000_000 });
  });
});

/** A run of the racer (helpers/store-racer.ts) in a process of its own. */
function racer(mode: 'race' | 'hang', backend: string, where: string, count: number): { child: ChildProcess; out: () => string; line: (text: string) => Promise<void>; exited: Promise<number | null> } {
  const child = spawn(process.execPath, ['--import', 'tsx', RACER, mode, backend, where, String(count)], { stdio: ['pipe', 'pipe', 'inherit'] });
  let out = '';
  const listeners = new Set<() => void>();
  child.stdout?.on('data', (c: Buffer) => {
    out += c.toString();
    for (const l of listeners) l();
  });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const line = (text: string): Promise<void> =>
    new Promise((resolve, reject) => {
      const check = (): void => {
        if (out.includes(text)) {
          listeners.delete(check);
          resolve();
        }
      };
      listeners.add(check);
      void exited.then(() => (out.includes(text) ? resolve() : reject(new Error(`the racer exited without saying ${text}: ${out}`))));
      check();
    });
  return { child, out: () => out, line, exited };
}
const RACER = fileURLToPath(new URL('./helpers/store-racer.ts', import.meta.url));

describe.each(backends)('the store contract across processes: $name', (backend) => {
  let opened: Opened;
  afterEach(async () => {
    await opened?.close();
  });
  const where = async (): Promise<string> => {
    if (backend !== sqlite) {
      opened = await backend.open();
      return opened.address;
    }
    const dir = tempDir();
    const path = join(dir.path, 'store.db');
    const s = Store.open(path, { tool: 'test' });
    opened = {
      address: path,
      begin: async () => s.beginRun('svc', info),
      opening: async () => async () => s.beginRun('svc', info),
      raw: async (t, ...p) => s.db.prepare(t).all(...p) as Record<string, unknown>[],
      close: async () => {
        s.close();
        dir.cleanup();
      },
    };
    return path;
  };

  it('two processes racing over the same 1,000 companies: each is bought by exactly one', async () => {
    const at = await where();
    const runs = [racer('race', backend === sqlite ? 'sqlite' : 'postgres', at, 1_000), racer('race', backend === sqlite ? 'sqlite' : 'postgres', at, 1_000)];
    await Promise.all(runs.map((r) => r.line('ready')));
    for (const r of runs) r.child.stdin?.write('go\n');
    expect(await Promise.all(runs.map((r) => r.exited))).toStrictEqual([0, 0]);
    const [a, b] = runs.map((r) => JSON.parse(r.out().split('\n').filter((l) => l.startsWith('{')).pop() as string) as { bought: string[]; held: number });
    const all = [...(a?.bought ?? []), ...(b?.bought ?? [])];
    expect(all.length).toBe(1_000);
    expect(new Set(all).size).toBe(1_000);
    expect((a?.held ?? 0) + (b?.held ?? 0)).toBe(1_000);
    const rows = await opened.raw("SELECT count(*) AS n, sum(credits) AS credits FROM purchases WHERE outcome = 'hit'");
    expect(rows.map((r) => [Number(r['n']), Number(r['credits'])])).toStrictEqual([[1_000, 1_000]]);
  });

  it('kill -9 between intent and outcome: the next run takes every claim over under its own key', async () => {
    const at = await where();
    const run = racer('hang', backend === sqlite ? 'sqlite' : 'postgres', at, 20);
    await run.line('claimed');
    run.child.kill('SIGKILL');
    await run.exited;
    const next = await opened.begin();
    for (let i = 0; i < 20; i++) {
      expect(await next.append({ type: 'intent', company: `c${i}.com`, generation: 1, keyVersion: 1, key: `k-c${i}.com` }, true)).toStrictEqual({ kind: 'ok', tookOver: true });
    }
    await next.close();
  });
});

/**
 * P, paused past its lease with old.com planned under the old epoch; a prune commits just before the statement matching `before`.
 * `blocking`: P's batch also asks again about x.com, whose lookup the prune forgets, and the prune runs beside it, let go once it waits.
 */
async function raceProbe(s: Opened, before: string, company = 'old.com', blocking = false): Promise<void> {
  const first = await s.begin();
  const k0 = idempotencyKey(first.storeId, 'old.com', 1, 1);
  expect(await first.append(intent('old.com', { key: k0 }), true)).toStrictEqual({ kind: 'ok' });
  await first.append(hit('old.com', 1, 1_000));
  const match: StoreEvent = { type: 'match', domain: 'x.com', status: 'hit', company: 'x.com', name: 'X' };
  await first.append(match);
  await first.flush();
  await s.raw("UPDATE lookups SET checked_at = 1000 WHERE domain = 'x.com'");
  await first.endRun({ status: 'done', credits: 1, bought: 1, reused: 0 });
  await first.close();
  const p = await s.begin();
  expect(p.storeId).toBe(first.storeId);
  await s.raw("UPDATE runs SET host = 'laptop-p', heartbeat_at = ? WHERE id = ?", Date.now() - LEASE_MS - 5_000, p.runId);
  const [svc] = await s.raw("SELECT id FROM services WHERE name = 'svc'");
  const client = new pg.Client({ connectionString: s.address });
  await client.connect();
  let fired = false;
  let chain: Promise<unknown> = Promise.resolve();
  let pruning: Promise<void> = Promise.resolve();
  const prune = async (): Promise<void> => {
    const ledger = await openLedgerStore(s.address, { tool: 'test', env: {}, write: true, create: false });
    try {
      await ledger.prune(2_000, false);
    } finally {
      await ledger.close();
    }
  };
  // The prune waits for the lookup row the batch holds.
  const waiting = async (): Promise<number> => (await sql<{ n: number }>(s.address, "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'DELETE FROM lookups%'"))[0]?.n ?? 0;
  const wrapped = {
    query(q: unknown, v?: unknown): Promise<pg.QueryResult> {
      const text = typeof q === 'string' ? q : (q as { text: string }).text;
      const r = chain.then(async () => {
        if (!fired && text.includes(before)) {
          fired = true;
          pruning = prune();
          if (blocking) await expect.poll(waiting, { timeout: 60_000, interval: 20 }).toBe(1);
          else await pruning;
        }
        return client.query(q as string, v as unknown[]);
      });
      chain = r.catch(() => {});
      return r;
    },
  } as unknown as pg.Client;
  const events = [...(blocking ? [match] : []), intent(company, { key: idempotencyKey(p.storeId, company, 1, 1) })];
  const claims = await commitBatch(wrapped, new BatchPlan(Number(svc?.['id']), p.runId, 'laptop-p', events, Date.now(), [], p.storeId), 30_000, false);
  await client.end();
  expect(fired).toBe(true);
  // Before, a prune the server chose to end for the deadlock failed with it.
  await pruning;
  expect(await s.raw("SELECT value FROM meta WHERE key = 'key_epoch'")).toStrictEqual([{ value: '1' }]);
  // Beside it, the batch ends either way: first (not pruned), or sent again after it (pruned).
  if (blocking) return;
  // The prune committed before the claim did: a key derived before it must not be written after it.
  expect(claims[0]?.claim.kind).toBe('pruned');
}
