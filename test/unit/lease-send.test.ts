import { describe, expect, it } from 'vitest';
import { apiErrorFromResponse } from '../../src/api/errors.js';
import type { ServiceClient } from '../../src/api/client.js';
import { systemClock } from '../../src/pipeline/clock.js';
import { execute } from '../../src/pipeline/execute.js';
import { Progress } from '../../src/pipeline/progress.js';
import { Flow } from '../../src/pipeline/flow.js';
import { RunState } from '../../src/pipeline/state.js';
import { Heartbeat } from '../../src/store/heartbeat.js';
import { MemoryStore, type MemoryRun } from '../helpers/memory-store.js';
import { companyRecord } from '../helpers/records.js';

/**
 * Found by an adversarial review: the lease was checked before a paid request was queued, not as
 * it left. A request that waited in the queue past the lease (the machine slept) went out under a
 * key another run had since retired and bought again under a new one: charged twice.
 */
const problem = (status: number, code: string): Error =>
  apiErrorFromResponse({ status, contentType: 'application/problem+json', retryAfter: undefined, requestId: undefined, body: JSON.stringify({ code, status }) });

/** As the spec's service: a 200 is stored under its key and replayed free; an error stores nothing. */
function service(): { answer(domain: string, key: string): { matched: true; credits_charged: number; credits_remaining: number; company: ReturnType<typeof companyRecord> }; charges: Map<string, number>; fault(n: number): void } {
  const stored = new Set<string>();
  const charges = new Map<string, number>();
  let faults = 0;
  return {
    charges,
    fault: (n) => (faults = n),
    answer(domain, key) {
      const ok = { matched: true as const, credits_charged: 1, credits_remaining: 10, company: companyRecord(domain) };
      if (stored.has(key)) return ok;
      if (faults > 0) {
        faults--;
        throw problem(500, 'internal');
      }
      charges.set(domain, (charges.get(domain) ?? 0) + 1);
      stored.add(key);
      return ok;
    },
  };
}

async function stateFor(domains: string[], store: MemoryRun): Promise<RunState> {
  const state = new RunState();
  for (const d of domains) state.loadDomain(state.addDomain(d), { action: 'hit', company: d, name: d });
  for (const c of state.companies) {
    const { purchase } = await store.companyState(c.domain);
    state.loadCompany(c, { action: 'buy', generation: 1, refresh: false, held: null, resume: purchase });
  }
  return state;
}

const run = (state: RunState, client: ServiceClient, store: MemoryRun, concurrency: number): ReturnType<typeof execute> =>
  execute(
    state,
    { dryRun: false, maxCredits: null, retry: { maxAttempts: 20, maxRateLimitedAttempts: 3, baseDelayMs: 2, maxDelayMs: 4 }, matchesQueued: 4, graceMs: 100, settleMs: 5 },
    {
      client,
      flow: new Flow(systemClock, concurrency),
      store,
      planCompany: () => {},
      clock: systemClock,
      random: () => 0.5,
      idempotencyKey: (c, v) => `${c.domain}#${v}`,
      progress: new Progress().sink,
    },
    new AbortController().signal,
  );

const matchAll: ServiceClient['match'] = async (domain) => ({ matched: true, credits_charged: 0, company: { domain, name: domain } });

/** A service that sells every company, and the keys it was sent. */
function buyingClient(): { sent: string[]; client: ServiceClient } {
  const sent: string[] = [];
  const client: ServiceClient = {
    match: matchAll,
    enrich: async (domain, { idempotencyKey }) => {
      sent.push(idempotencyKey);
      return { matched: true, credits_charged: 1, credits_remaining: 10, company: companyRecord(domain) };
    },
  };
  return { sent, client };
}

/**
 * Run A's service: x.com's answer is held until `releaseX`, so A's requests for the companies
 * after it (one at a time) wait in the queue with their intents written.
 */
function holdingX(svc: ReturnType<typeof service>): { client: ServiceClient; sent: string[]; xInFlight: Promise<void>; releaseX: () => void } {
  let releaseX!: () => void;
  const xHeld = new Promise<void>((resolve) => (releaseX = resolve));
  let xSent!: () => void;
  const xInFlight = new Promise<void>((resolve) => (xSent = resolve));
  const sent: string[] = [];
  const client: ServiceClient = {
    match: matchAll,
    enrich: async (domain, { idempotencyKey }) => {
      sent.push(idempotencyKey);
      if (domain === 'x.com') {
        xSent();
        await xHeld;
      }
      return svc.answer(domain, idempotencyKey);
    },
  };
  return { client, sent, xInFlight, releaseX };
}

/**
 * Run A taken for dead (its machine asleep past the lease); run B takes `domains` over, and with
 * `faults` 500s (nothing stored under the keys) retires A's keys on the settle rule and buys them.
 */
async function takeOver(store: MemoryStore, a: MemoryRun, svc: ReturnType<typeof service>, domains: string[], faults: number): Promise<{ stop: Awaited<ReturnType<typeof run>>; state: RunState }> {
  store.kill(a.runId);
  const b = store.beginRun();
  const storeB = Object.assign(Object.create(b) as MemoryRun, { leaseLapsed: () => false });
  svc.fault(faults);
  const clientB: ServiceClient = {
    match: matchAll,
    enrich: async (domain, { idempotencyKey }) => svc.answer(domain, idempotencyKey),
    probeEnrich: async () => {
      throw problem(422, 'validation_error');
    },
  };
  const state = await stateFor(domains, b);
  return { stop: await run(state, clientB, storeB, 4), state };
}

describe('a paid request queued before its lease lapsed', () => {
  it('is not sent under a key another run retired since: it claims again, finding it moved on', async () => {
    const svc = service();
    const store = new MemoryStore();
    const a = store.beginRun();
    // As store/heartbeat.ts: a lapse is said once, and the beat it sends renews the lease.
    let lapsed = false;
    const storeA = Object.assign(Object.create(a) as MemoryRun, {
      leaseLapsed: () => {
        const was = lapsed;
        lapsed = false;
        return was;
      },
    });
    const { client: clientA, sent: sentByA, xInFlight, releaseX } = holdingX(svc);
    // One request at a time: y.com's waits in the queue behind x.com's, its intent already written.
    const runA = run(await stateFor(['x.com', 'y.com'], a), clientA, storeA, 1);
    await xInFlight;
    while (!store.events.some((e) => e.type === 'intent' && e.company === 'y.com')) await new Promise((resolve) => setImmediate(resolve));

    // A's machine sleeps past the lease; another run takes y.com over, its key y.com#1 meets 500s
    // (nothing stored under it), is retired on the settle rule, and y.com is bought under y.com#2.
    lapsed = true;
    const { stop, state: stateB } = await takeOver(store, a, svc, ['y.com'], 3);
    expect(stop).toBeNull();
    expect(stateB.company('y.com')?.status).toBe('hit');

    // A wakes: its queued request for y.com is withdrawn as it leaves, and the claim again finds it bought.
    releaseX();
    await runA;
    expect(sentByA).toStrictEqual(['x.com#1']);
    expect(svc.charges.get('y.com')).toBe(1);
  });

  it('is sent once the lease is renewed, however many asks the lapse lasts: never left undone', async () => {
    const store = new MemoryStore();
    const a = store.beginRun();
    let lapsedAsks = 3;
    const storeA = Object.assign(Object.create(a) as MemoryRun, { leaseLapsed: () => lapsedAsks-- > 0 });
    const { sent, client } = buyingClient();
    const state = await stateFor(['x.com'], a);
    expect(await run(state, client, storeA, 1)).toBeNull();
    expect(sent).toStrictEqual(['x.com#1']);
    expect(state.company('x.com')?.status).toBe('hit');
  });

  // Beats that answer late, as on the team store.
  it('a wall clock set forward with late beats: one renewal per lapse, every company bought', async () => {
    const store = new MemoryStore();
    const a = store.beginRun();
    let wall = Date.now();
    let beats = 0;
    const beat = new Heartbeat(
      () => {
        beats++;
        return new Promise((resolve) => setTimeout(resolve, 30));
      },
      60_000,
      { now: () => wall, monotonic: () => performance.now() },
    );
    const storeA = Object.assign(Object.create(a) as MemoryRun, { leaseLapsed: () => beat.lapsed(), renewLease: () => beat.renew() });
    const { sent, client } = buyingClient();
    const domains = Array.from({ length: 20 }, (_, i) => `d${i}.com`);
    const state = await stateFor(domains, a);
    wall += 120_000;
    expect(await run(state, client, storeA, 4)).toBeNull();
    // Before: every company withdrawn twice and left pending (exit 0), 60 beats under way at once.
    expect(domains.map((d) => state.company(d)?.status)).toStrictEqual(domains.map(() => 'hit'));
    expect(sent).toHaveLength(20);
    expect(beats).toBeLessThanOrEqual(2);
  });

  // The first one's beat makes the lease fresh for the rest.
  it('every request queued across a lapse claims again, not only the first to ask', async () => {
    const svc = service();
    const store = new MemoryStore();
    const a = store.beginRun();
    const clocks = { wall: 1_000_000, steady: 0 };
    // SQLite's beat: written at once.
    const beat = new Heartbeat(() => undefined, 45_000, { now: () => clocks.wall, monotonic: () => clocks.steady });
    beat.start();
    const storeA = Object.assign(Object.create(a) as MemoryRun, { leaseLapsed: () => beat.lapsed(), renewLease: () => beat.renew(), leaseEpoch: () => beat.epoch });
    const { client: clientA, sent: sentByA, xInFlight, releaseX } = holdingX(svc);
    const runA = run(await stateFor(['x.com', 'y.com', 'z.com'], a), clientA, storeA, 1);
    await xInFlight;
    while (!['y.com', 'z.com'].every((d) => store.events.some((e) => e.type === 'intent' && e.company === d))) await new Promise((resolve) => setImmediate(resolve));
    // A sleeps a minute; B takes y.com and z.com over, retires their first keys on the settle rule, and buys both.
    clocks.wall += 60_000;
    clocks.steady += 60_000;
    expect((await takeOver(store, a, svc, ['y.com', 'z.com'], 6)).stop).toBeNull();
    svc.fault(0);
    releaseX();
    await runA;
    beat.stop();
    // Before: y.com saw the lapse and claimed again; z.com, asking after y.com's beat, went out under z.com#1.
    expect(sentByA).toStrictEqual(['x.com#1']);
    expect(svc.charges.get('y.com')).toBe(1);
    expect(svc.charges.get('z.com')).toBe(1);
  });
});

