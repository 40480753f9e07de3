import Database from 'libsql';
import { describe, expect, it } from 'vitest';
import { serviceIdentity } from '../src/api/endpoint.js';
import { mulberry32 } from '../src/sandbox/random.js';
import { csvText, runCli } from './helpers/cli.js';
import { spawnCli } from './helpers/spawn.js';
import { sandboxSuite } from './helpers/sandbox-suite.js';

/**
 * Two processes on one store, racing: over real HTTP against the sandbox, whose ledger is the
 * proof. The store is large (100,000 companies held), as in the audit that found a plan reading
 * the store in two steps could see a purchase closed without its company, and buy it again.
 */
const KEY = 'sk_test_races_0123456789';
const t = sandboxSuite(KEY);

/** Fills the store with `n` companies the inputs never name, as a year of purchases would. */
function fillStore(path: string, service: string, n: number): void {
  const db = new Database(path);
  try {
    const id = (db.prepare('SELECT id FROM services WHERE name = ?').raw(true).get(service) as [number])[0];
    const insert = db.prepare(
      "INSERT INTO companies (service, domain, name, record, bought_at, last_updated, idempotency_key, credits, generation, run) VALUES (?, ?, ?, ?, ?, '2026-01-01', NULL, 1, 1, NULL)",
    );
    const purchase = db.prepare("INSERT INTO purchases (service, domain, generation, key_version, outcome, opened_at, closed_at, credits) VALUES (?, ?, 1, 1, 'hit', ?, ?, 1)");
    db.transaction(() => {
      for (let i = 0; i < n; i++) {
        const domain = `held-${i}.example`;
        insert.run(id, domain, domain, JSON.stringify({ domain, name: domain, specialties: [] }), Date.now());
        purchase.run(id, domain, Date.now(), Date.now());
      }
    })();
  } finally {
    db.close();
  }
}

describe('two runs at once on a large store', () => {
  // The plan reads one snapshot, and a claim refuses a company held fresh.
  it('over overlapping inputs, round after round, charge each company once', async () => {
    await t.sandbox({ latencyMs: 2 });
    const store = t.dir.file('store.db');
    const env = t.env({ ENRICH_STORE: store });
    const all = [...t.sb.directory].map((c) => c.domain);
    // The store and its service row, then a year of other purchases.
    const first = await runCli([t.dir.file('seed.csv', csvText([['domain'], [all[0] as string]])), '-o', t.dir.file('seed.out.csv'), '--quiet'], { env });
    expect(first.code, first.stderr).toBe(0);
    fillStore(store, serviceIdentity(t.sb.url), 100_000);
    const random = mulberry32(19);
    const rounds = 3;
    const per = 300;
    for (let round = 0; round < rounds; round++) {
      const fresh = all.slice(1 + round * per * 2, 1 + (round + 1) * per * 2);
      const a = fresh.slice(0, per + per / 2);
      const b = fresh.slice(per / 2);
      const inA = t.dir.file(`a${round}.csv`, csvText([['domain'], ...a.map((d) => [d])]));
      const inB = t.dir.file(`b${round}.csv`, csvText([['domain'], ...b.map((d) => [d])]));
      const before = t.sb.stats.requests;
      const runA = spawnCli([inA, '-o', t.dir.file(`a${round}.out.csv`), '--quiet', '--concurrency', '8'], { env });
      // B starts once A is buying: at a point picked by progress, a different one each round.
      const startAt = before + per + Math.floor(random() * per);
      let aDone = false;
      void runA.exited.then(() => (aDone = true));
      while (!aDone && t.sb.stats.requests < startAt) await new Promise((r) => setTimeout(r, 2));
      const runB = spawnCli([inB, '-o', t.dir.file(`b${round}.out.csv`), '--quiet', '--concurrency', '8'], { env });
      expect(await runA.exited, runA.stderr()).toBe(0);
      expect(await runB.exited, runB.stderr()).toBe(0);
    }
    const charges = t.sb.chargesByDomain(KEY);
    const doubles = [...charges].filter(([, n]) => n > 1);
    expect(doubles).toStrictEqual([]);
    expect(charges.size).toBe(1 + rounds * per * 2);
  });
});
