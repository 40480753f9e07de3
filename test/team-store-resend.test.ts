import type pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import type { CompanyRecord } from '../src/api/types.js';
import { PgStore } from '../src/store/postgres/store.js';
import type { PgRecords } from '../src/store/postgres/records.js';
import { BatchPlan, commitBatch, LEASE_MS } from '../src/store/postgres/writer.js';
import type { StoreEvent } from '../src/store/types.js';
import { companyRecord } from './helpers/records.js';
import { freshDatabase, sql } from './helpers/postgres.js';

/**
 * Found by an adversarial review and fixed, each proven against a real PostgreSQL: a batch sent
 * again, a purchase closed by two runs, an import's retire sent twice. Each failed before its fix.
 */
const info = { inputName: 'in.csv', inputSha256: 'x', rows: 1, dryRun: false, options: {} };
const record = (domain: string): CompanyRecord => companyRecord(domain, { employee_count: 5 });
const intent = (c: string, at = Date.now()): StoreEvent => ({ type: 'intent', company: c, generation: 1, keyVersion: 1, key: `k-${c}`, at });
const hit = (c: string, at: number): StoreEvent => ({ type: 'enrich', company: c, generation: 1, keyVersion: 1, status: 'hit', charged: 1, record: record(c), keyUsed: `k-${c}`, at });

let stores: PgStore[] = [];
afterEach(async () => {
  for (const s of stores) await s.close();
  stores = [];
});

async function open(url: string): Promise<PgStore> {
  const s = await PgStore.open(url, { tool: 'test' });
  stores.push(s);
  return s;
}

/** Run `a` on another machine whose heartbeat stopped a lease ago (killed, or paused: Ctrl-Z, a laptop asleep). */
async function lapse(url: string, run: number): Promise<void> {
  await sql(url, "UPDATE runs SET host = 'laptop-a', heartbeat_at = $1 WHERE id = $2", [Date.now() - LEASE_MS - 5_000, run]);
}

/**
 * On a fresh team store, run `a` claims acme.com and its lease lapses (it went away, or was paused
 * with its answer in hand); run `b` begins beside it.
 */
async function lapsedClaim(): Promise<{ url: string; store: PgStore; a: PgRecords; b: PgRecords }> {
  const url = await freshDatabase();
  const store = await open(url);
  const a = await store.beginRun('svc', info);
  expect(await a.append(intent('acme.com'), true)).toStrictEqual({ kind: 'ok' });
  await lapse(url, a.runId);
  return { url, store, a, b: await store.beginRun('svc', info) };
}

/**
 * The answer to the run's next COMMIT is lost after the COMMIT landed (a dropped network, a
 * server stopping right after it): PgRecords.commit connects again and sends the batch again.
 */
function loseNextCommitAnswer(records: PgRecords): void {
  const writer = (records as unknown as { writer: pg.Client }).writer;
  const query = writer.query.bind(writer) as (...args: unknown[]) => Promise<unknown>;
  let armed = true;
  (writer as unknown as { query: (...args: unknown[]) => Promise<unknown> }).query = (...args: unknown[]) => {
    const sent = query(...args);
    if (!armed || args[0] !== 'COMMIT') return sent;
    armed = false;
    return sent.then(() => {
      throw new Error('Connection terminated unexpectedly');
    });
  };
}

// The commit in records.ts.
describe('a batch sent again after its COMMIT answer was lost', () => {
  it("a claim that took over a dead run's purchase still says tookOver when its batch is resent", async () => {
    // Run a wrote its intent and may have sent the paid call under k-acme.com, then went away.
    const { b } = await lapsedClaim();
    loseNextCommitAnswer(b);
    // Control (same store, no lost answer) is the contract test "takes over a dead run's claim": { kind: 'ok', tookOver: true }.
    // Here the first COMMIT lands, its answer is lost, and the resent batch finds owner_run = b: the rule alone would answer tookOver false.
    expect(await b.append(intent('acme.com'), true)).toStrictEqual({ kind: 'ok', tookOver: true });
  });

  it('without the lost answer the same takeover says tookOver', async () => {
    const { b } = await lapsedClaim();
    expect(await b.append(intent('acme.com'), true)).toStrictEqual({ kind: 'ok', tookOver: true });
  });
});

// writer.ts's closing UPDATE, store/purchase.ts applyOutcome.
describe('a purchase closed by two runs', () => {
  it("a paused run taken over, its late answer recorded after the taker's, counts one charge", async () => {
    // a is paused (Ctrl-Z, a laptop lid) with its answer in hand; its lease lapses; b takes over and
    // sends under the same key: the service replays, charging nothing more (one charge in all).
    const { url, a, b } = await lapsedClaim();
    expect(await b.append(intent('acme.com'), true)).toStrictEqual({ kind: 'ok', tookOver: true });
    await b.append(hit('acme.com', Date.now()));
    await b.flush();
    // a wakes and records the answer it had: the closing UPDATE has no outcome = 'open' guard.
    await a.append(hit('acme.com', Date.now() + 1));
    await a.flush();
    const [row] = await sql<{ credits: number }>(url, 'SELECT credits FROM purchases');
    expect(Number(row?.credits)).toBe(1);
  });

  it('a batch resent after another run closed the purchase in between still counts one credit', async () => {
    const { url, store, a, b } = await lapsedClaim();
    await b.append(intent('acme.com'), true);
    const serviceId = await store.serviceId('svc');
    const aw = (a as unknown as { writer: pg.Client }).writer;
    const aPlan = (): BatchPlan => new BatchPlan(serviceId, a.runId, store.host, [hit('acme.com', 1_700_000_000_100)], 1_700_000_000_100, []);
    await commitBatch(aw, aPlan()); // a's COMMIT lands, its answer is lost
    await b.append(hit('acme.com', 1_700_000_000_200)); // b's batch lands in between
    await b.flush();
    await commitBatch(aw, aPlan()); // a sends its batch again: the guard compares with b's close
    const [row] = await sql<{ credits: number }>(url, 'SELECT credits FROM purchases');
    expect(Number(row?.credits)).toBe(1);
  });
});

// pipeline/run-purchase.ts onClaim, pipeline/run-purchase.ts keyVerdict.
describe('what a lost tookOver would cost', () => {
  // The key left "claimed": a 500, or a 409 while the dead run's call still runs, retires it.
  it('a takeover read as a plain ok would retire, on the next 500, a key that may be charged', async () => {
    const { onClaim, FIRST_PURCHASE } = await import('../src/pipeline/run-purchase.js');
    const { keyVerdict } = await import('../src/pipeline/run-purchase.js');
    const { apiErrorFromResponse } = await import('../src/api/errors.js');
    const internal = apiErrorFromResponse({ status: 500, contentType: 'application/problem+json', retryAfter: undefined, requestId: undefined, body: JSON.stringify({ code: 'internal', status: 500 }) });
    const claim = { type: 'intent' as const, company: 'acme.com', generation: 1, keyVersion: 1, key: 'k-acme.com', at: 5_000 };
    const asSent = onClaim(FIRST_PURCHASE, claim, { kind: 'ok', tookOver: true }).purchase;
    const asResent = onClaim(FIRST_PURCHASE, claim, { kind: 'ok' }).purchase;
    expect(asSent).toMatchObject({ state: 'uncertain', lostAt: 5_000 });
    expect(asResent).toMatchObject({ state: 'claimed' });
    expect(keyVerdict({ purchase: asSent! }, internal)).toBe('kept');
    expect(keyVerdict({ purchase: asResent! }, internal)).toBe('retired');
  });
});

// Run null: the retire UPDATE has no key-version guard.
describe("an import's batch sent again", () => {
  it('a key retired on the settle rule counts one unconfirmed credit, however often resent', async () => {
    const url = await freshDatabase();
    const store = await open(url);
    const serviceId = await store.serviceId('svc');
    const importer = await store.records('svc');
    await importer.append(intent('acme.com', 1_000));
    await importer.flush();
    const c = (importer as unknown as { writer: pg.Client }).writer;
    const settled: StoreEvent = { type: 'enrich', company: 'acme.com', generation: 1, keyVersion: 1, status: 'error', code: 'internal', verdict: 'retired', unconfirmed: true, keyUsed: 'k-acme.com', at: 2_000 };
    const plan = (): BatchPlan => new BatchPlan(serviceId, null, store.host, [settled], 2_000, []);
    await commitBatch(c, plan());
    await commitBatch(c, plan());
    const [row] = await sql<{ unconfirmed: number; key_version: number }>(url, 'SELECT unconfirmed, key_version FROM purchases');
    expect([Number(row?.unconfirmed), Number(row?.key_version)]).toStrictEqual([1, 2]);
  });
});
