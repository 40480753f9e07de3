import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { mulberry32 } from '../../src/sandbox/random.js';
import type { Store } from '../../src/store/sqlite/store.js';
import type { StoreEvent } from '../../src/store/types.js';
import { RecordWriter } from '../../src/store/sqlite/writer.js';
import { companyRecord, runInfo } from '../helpers/records.js';
import { useStoreFiles } from '../helpers/store-files.js';

const files = useStoreFiles();

const COMPANIES = ['acme.com', 'beta.io', 'gamma.co.uk'];

/** A random run of events over three companies: claims, answers of every kind, releases and unclaims, lookups. */
function events(seed: number, count: number): StoreEvent[] {
  const random = mulberry32(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)] as T;
  const out: StoreEvent[] = [];
  for (let i = 0; i < count; i++) {
    const company = pick(COMPANIES);
    const generation = pick([1, 1, 1, 2]);
    const keyVersion = pick([1, 1, 2, 3]);
    const key = `k-${company}-${generation}-${keyVersion}`;
    const at = 1_000 + i;
    switch (pick(['intent', 'intent', 'hit', 'miss', 'retired', 'kept', 'final', 'release', 'unclaim', 'match'] as const)) {
      case 'intent':
        out.push({ type: 'intent', company, generation, keyVersion, key, at, ...(random() < 0.3 ? { freshSince: random() < 0.5 ? null : 1_010 } : {}) });
        break;
      case 'hit':
        out.push({ type: 'enrich', company, generation, keyVersion, status: 'hit', charged: 1, at, keyUsed: key, record: companyRecord(company, { name: `${company} #${i}`, last_updated: `2026-01-0${1 + (i % 9)}T00:00:00Z` }) });
        break;
      case 'miss':
        out.push({ type: 'enrich', company, generation, keyVersion, status: 'miss', charged: 0, at, keyUsed: key });
        break;
      case 'retired':
        out.push({ type: 'enrich', company, generation, keyVersion, status: 'error', code: 'internal', verdict: 'retired', at, ...(random() < 0.5 ? { unconfirmed: true } : {}) });
        break;
      case 'kept':
        out.push({ type: 'enrich', company, generation, keyVersion, status: 'error', code: 'network_error', verdict: 'kept', lost: random() < 0.5, at });
        break;
      case 'final':
        out.push({ type: 'enrich', company, generation, keyVersion, status: 'error', code: 'validation_error', final: true, charged: 0, at });
        break;
      case 'release':
        out.push({ type: 'release', company, generation });
        break;
      case 'unclaim':
        out.push({ type: 'unclaim', company, generation, keyVersion, key });
        break;
      case 'match':
        out.push({ type: 'match', domain: company, status: 'hit', company, name: company });
        break;
    }
  }
  return out;
}

/** Everything the store holds of the service, row by row. */
function contents(store: Store): unknown {
  const all = (sql: string): unknown[] => store.db.prepare(sql).raw(true).all();
  return {
    purchases: all('SELECT domain, generation, key_version, intent_key, uncertain, unconfirmed, error_code, lost_at, outcome, credits, owner_run, run, opened_at, closed_at FROM purchases ORDER BY domain, generation'),
    companies: all('SELECT domain, name, record, bought_at, last_updated, idempotency_key, credits, generation, run FROM companies ORDER BY domain'),
    lookups: all('SELECT domain, status, company, name FROM lookups ORDER BY domain'),
  };
}

describe("the writer's batch", () => {
  // A batch reads every purchase and holding it touches at once and then sees its own writes
  // (writer.ts BatchView): it must decide exactly as writing each event in a transaction of its
  // own, reading the store afresh, does.
  it('decides and writes as one transaction per event would: the same claims, the same rows', () => {
    // 25 seeds: of seven mutations of the batch's rule, the four that 150 seeds catch, seed 1 caught.
    for (let seed = 1; seed <= 25; seed++) {
      const list = events(seed, 40);
      const [together, apart] = ['together.db', 'apart.db'].map((name) => {
        const store = files.open(join(files.dir.path, `${seed}-${name}`));
        const run = store.beginRun('svc', runInfo);
        return { store, writer: new RecordWriter(store, store.serviceId('svc'), run.runId) };
      }) as [{ store: Store; writer: RecordWriter }, { store: Store; writer: RecordWriter }];
      const claims = together.writer.write(list.map((event) => ({ event, durable: event.type === 'intent' })), 5_000);
      const one = list.map((event) => apart.writer.write([{ event, durable: event.type === 'intent' }], 5_000)[0]);
      expect(claims, `seed ${seed}`).toStrictEqual(one);
      expect(contents(together.store), `seed ${seed}`).toStrictEqual(contents(apart.store));
    }
  });
});

describe("the writer's statements", () => {
  it("are a few whatever the batch sizes, each prepared once for the connection's life", () => {
    const store = files.open();
    const run = store.beginRun('svc', runInfo);
    const writer = new RecordWriter(store, store.serviceId('svc'), run.runId);
    const texts = new Set<string>();
    const sql = store.sql.bind(store);
    store.sql = (text: string) => {
      texts.add(text);
      return sql(text);
    };
    let domain = 0;
    for (let size = 1; size <= 450; size += 7) {
      const batch = Array.from({ length: size }, () => ({ event: { type: 'match', domain: `d${domain++}.com`, status: 'miss' } as StoreEvent, durable: false }));
      writer.write(batch, 5_000);
    }
    expect(store.db.prepare('SELECT count(*) FROM lookups').raw(true).get()).toStrictEqual([domain]);
    // One a size a batch happened to have held 8 MiB of a 20,000-domain run's peak.
    expect(texts.size).toBeLessThanOrEqual(6);
  });
});
