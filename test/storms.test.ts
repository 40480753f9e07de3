import { describe, expect, it } from 'vitest';
import type { RunOptions, RunResult } from '../src/commands/run.js';
import type { Sandbox, SandboxOptions } from '../src/sandbox/index.js';
import { csvText, readCsvFile } from './helpers/cli.js';
import { batchOptions, runQuietBatch } from './helpers/batch.js';
import { sandboxSuite } from './helpers/sandbox-suite.js';

const KEY = 'sk_test_storm';
const t = sandboxSuite(KEY);

/** The batch as a function, with retries fast enough for a test (the policy is the only change). */
async function batch(options: SandboxOptions, companies: number, extra: Partial<RunOptions> = {}): Promise<{ result: RunResult; domains: string[]; out: string; sb: Sandbox }> {
  if (!t.started) await t.sandbox(options);
  const sb = t.sb;
  const domains = [...sb.directory].slice(0, companies).map((c) => c.domain);
  const input = t.dir.file('in.csv', csvText([['domain'], ...domains.map((d) => [d])]));
  const out = t.dir.file('out.csv');
  const result = await runQuietBatch(batchOptions(t.dir.path, input, { baseUrl: sb.url, apiKey: KEY }, { output: out, ...extra }));
  return { result, domains, out, sb };
}

function expectEachChargedOnce(domains: string[]): void {
  const charged = t.sb.chargesByDomain(KEY);
  expect([...charged.keys()].sort()).toStrictEqual([...domains].sort());
  for (const [domain, n] of charged) expect(n, domain).toBe(1);
}

describe('storms', () => {
  it('survives a 429 storm: one shared pause, everything enriched once', async () => {
    const { result, domains, out, sb } = await batch({ rateLimit: 40, burst: 2 }, 25);
    expect(result.stop).toBeNull();
    expect(result.summary).toMatchObject({ matched: 25, errors: 0, skipped: 0, credits_charged: 25 });
    expect(sb.stats.byStatus[429] ?? 0).toBeGreaterThan(0);
    expectEachChargedOnce(domains);
    expect(readCsvFile(out).every((r) => r['enrich_status'] === 'matched')).toBe(true);
  });

  it('survives a 500 storm: a stored 500 is never replayed forever, because the key moves on', async () => {
    const { result, domains, sb } = await batch({ failRate: 0.3, seed: 11 }, 30);
    expect(result.summary).toMatchObject({ matched: 30, errors: 0, credits_charged: 30 });
    expect(sb.stats.byStatus[500] ?? 0).toBeGreaterThan(5);
    expectEachChargedOnce(domains);
  });

  it('survives lost answers: the retry keeps its key and the service replays, not charges', async () => {
    const { result, domains, sb } = await batch({ dropRate: 0.3, seed: 5 }, 30);
    expect(result.summary).toMatchObject({ matched: 30, errors: 0 });
    expect(sb.stats.dropped).toBeGreaterThan(5);
    expect(sb.stats.replays).toBeGreaterThan(0);
    expectEachChargedOnce(domains);
    // Lost answers may have been charged, so this run counts only what it saw; the ledger is the truth.
    expect(sb.ledger(KEY)).toHaveLength(30);
  });

  it('survives all three at once', async () => {
    const { result, domains } = await batch({ rateLimit: 60, burst: 3, failRate: 0.15, dropRate: 0.15, latencyMs: 3, seed: 3 }, 30);
    expect(result.summary).toMatchObject({ matched: 30, errors: 0 });
    expectEachChargedOnce(domains);
  });

  it('reports rows as errors when retries run out; a rerun finishes them without paying twice', async () => {
    const first = await batch({ failRate: 1 }, 6, { retry: { maxAttempts: 2, maxRateLimitedAttempts: 2, baseDelayMs: 1, maxDelayMs: 2 } });
    expect(first.result.summary).toMatchObject({ errors: 6, matched: 0 });
    expect(readCsvFile(first.out).map((r) => [r['enrich_status'], r['enrich_error']])).toStrictEqual(Array(6).fill(['error', 'internal']));
    first.sb.setFailRate(0);
    const second = await batch({}, 6);
    expect(second.result.summary).toMatchObject({ errors: 0, matched: 6, credits_charged: 6 });
    expectEachChargedOnce(second.domains);
  });
});
