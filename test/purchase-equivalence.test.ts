import { describe, expect, it } from 'vitest';
import type { CompanyRecord } from '../src/api/types.js';
import { mulberry32 } from '../src/sandbox/random.js';
import { PgStore } from '../src/store/postgres/store.js';
import { Store } from '../src/store/sqlite/store.js';
import type { Claim, CompanyState, ServiceStore, StoreEvent } from '../src/store/types.js';
import { tempDir } from './helpers/cli.js';
import { MemoryStore } from './helpers/memory-store.js';
import { freshDatabase } from './helpers/postgres.js';
import { companyRecord, runInfo } from './helpers/records.js';

/**
 * The purchase rules are written once (src/store/purchase.ts) and used by the SQLite store and
 * the in-memory one; the team store decides claims and outcomes in SQL (store/postgres/claim-sql.ts,
 * writer.ts), for one round trip per batch. This proves the SQL keeps the same rules: seeded
 * random sequences of intents, answers, losses, retirements, releases and unclaims from two live
 * runs, over a few companies and generations, go to all three backends, and after every event
 * each claim and each company's state must be the same.
 */
const COMPANIES = ['acme.com', 'bolt.io', 'crux.dev'];

const record = (domain: string, at: number): CompanyRecord => companyRecord(domain, { name: `${domain} at ${at}` });

/** One step: which run (0 or 1) appends which event. */
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
      event = { type: 'intent', company, generation, keyVersion, key, at, ...(fresh === undefined ? {} : { freshSince: fresh }) };
    } else if (roll < 0.75) {
      const status = pick(['hit', 'miss', 'error', 'error'] as const);
      const base = { type: 'enrich' as const, company, generation, keyVersion, at };
      if (status === 'hit') event = { ...base, status, charged: pick([0, 1]), record: record(company, at), keyUsed: key };
      else if (status === 'miss') event = { ...base, status, charged: 0 };
      else {
        const final = r() < 0.2;
        const verdict = pick(['retired', 'kept'] as const);
        event = { ...base, status, code: pick(['internal', 'network_error', 'validation_error']), verdict, ...(final ? { final: true } : {}), ...(r() < 0.3 ? { lost: true } : {}), ...(verdict === 'retired' && r() < 0.3 ? { unconfirmed: true } : {}) };
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

/** A claim as every backend can say it (a busy one's pid and host are the backend's own). */
function claimOf(c: Claim): unknown {
  if (c.kind === 'busy') return { kind: 'busy' };
  if (c.kind === 'held') return { kind: 'held', held: c.held };
  return c;
}

async function states(run: ServiceStore): Promise<Record<string, CompanyState>> {
  const out: Record<string, CompanyState> = {};
  await run.loadCompanies(COMPANIES, (domain, state) => (out[domain] = state));
  return out;
}

interface Backend {
  runs: [ServiceStore, ServiceStore];
  close(): Promise<void>;
}

async function memory(): Promise<Backend> {
  const store = new MemoryStore();
  return { runs: [store.beginRun(), store.beginRun()], close: async () => {} };
}

async function sqlite(): Promise<Backend> {
  const dir = tempDir();
  const a = Store.open(`${dir.path}/store.db`, { tool: 'test' });
  const b = Store.open(`${dir.path}/store.db`, { tool: 'test' });
  return {
    runs: [a.beginRun('svc', runInfo), b.beginRun('svc', runInfo)],
    close: async () => {
      a.close();
      b.close();
      dir.cleanup();
    },
  };
}

async function postgres(): Promise<Backend> {
  const url = await freshDatabase();
  const a = await PgStore.open(url, { tool: 'test' });
  const b = await PgStore.open(url, { tool: 'test' });
  return {
    runs: [await a.beginRun('svc', runInfo), await b.beginRun('svc', runInfo)],
    close: async () => {
      await a.close();
      await b.close();
    },
  };
}

describe('the team store keeps the purchase rules (store/purchase.ts) in SQL', () => {
  it.each([1, 2])('claims and states match the rules after every event (seed %i)', async (seed) => {
    const backends = { memory: await memory(), sqlite: await sqlite(), postgres: await postgres() };
    try {
      for (const [i, { run, event }] of steps(seed, 120).entries()) {
        const seen: Record<string, unknown> = {};
        for (const [name, b] of Object.entries(backends)) {
          const target = b.runs[run];
          const claim = await target.append(event, event.type === 'intent');
          await target.flush();
          seen[name] = { claim: claimOf(claim), states: await states(target) };
        }
        const where = `step ${i}: run ${run} ${JSON.stringify(event)}`;
        expect(seen['sqlite'], where).toStrictEqual(seen['memory']);
        expect(seen['postgres'], where).toStrictEqual(seen['memory']);
      }
    } finally {
      for (const b of Object.values(backends)) await b.close();
    }
  });
});
