import { describe, expect, it } from 'vitest';
import type { RunOptions } from '../src/commands/run.js';
import { RunState } from '../src/pipeline/state.js';
import type { SandboxOptions } from '../src/sandbox/index.js';
import { nextStep } from '../src/ui/summary.js';
import { csvText, runCli } from './helpers/cli.js';
import { batchOptions, runQuietBatch } from './helpers/batch.js';
import { sandboxSuite } from './helpers/sandbox-suite.js';

/** What a person is told about money must be true: estimates, balances, and what stopped a run. */
const KEY = 'sk_test_money';
const t = sandboxSuite(KEY);

async function batch(sandbox: SandboxOptions, domains: string[], extra: Partial<RunOptions> = {}) {
  if (!t.started) await t.sandbox(sandbox);
  const input = t.dir.file('in.csv', csvText([['domain'], ...domains.map((d) => [d])]));
  return runQuietBatch(
    batchOptions(t.dir.path, input, { baseUrl: t.sb.url, apiKey: KEY }, { output: '-', writesOutput: false, concurrency: 4, retry: { maxAttempts: 2, maxRateLimitedAttempts: 4, baseDelayMs: 1, maxDelayMs: 2 }, ...extra }),
  );
}

describe('the dry run says "exactly" only when every domain was answered', () => {
  it('gives a lower bound when free matches failed, and "exactly" once a rerun answers all', async () => {
    await t.sandbox({ failRate: 1 });
    const domains = [...t.sb.directory].slice(0, 6).map((c) => c.domain);
    const failed = await batch({}, domains, { dryRun: true });
    expect(failed.summary).toMatchObject({ unanswered_domains: 6, errors: 6, estimated_credits: 0 });
    expect(nextStep(failed.summary, failed.stop)).toBe(
      'a real run would spend at least 0 credits: 6 domains got no answer from the free match (see enrich_error), so the rest is unknown; run the dry run again',
    );
    t.sb.setFailRate(0);
    const answered = await batch({}, domains, { dryRun: true });
    expect(answered.summary).toMatchObject({ unanswered_domains: 0, estimated_credits: 6 });
    expect(nextStep(answered.summary, answered.stop)).toBe('a real run would spend exactly 6 credits; drop --dry-run to go ahead');
  });
});

describe('balances and stops', () => {
  // Answers arrive out of order, and replays carry old balances.
  it('shows the lowest balance seen, not the last one written', () => {
    const s = new RunState();
    s.addDomain('a.com');
    s.loadDomain(0, { action: 'hit', company: 'a.com', name: 'A' });
    s.apply({ type: 'enrich', company: 'a.com', generation: 1, keyVersion: 1, status: 'hit', charged: 1, remaining: 9_861 });
    s.apply({ type: 'enrich', company: 'a.com', generation: 1, keyVersion: 1, status: 'hit', charged: 0, remaining: 9_873 });
    expect(s.creditsRemaining).toBe(9_861);
  });

  it('a 402 on the free match says the account is blocked, not "needs 0 more credits"', async () => {
    await t.sandbox();
    const run = await batch({}, ['a.com']);
    const line = nextStep(run.summary, { reason: 'credits', balance: 0, required: 0, free: true });
    expect(line).toContain('refused even the free match for credits');
    expect(line).not.toContain('needs 0');
  });

  it('leads with the one line that matters when the key is refused, not a summary of zeros', async () => {
    await t.sandbox();
    const input = t.dir.file('in.csv', csvText([['domain'], ['a.com'], ['b.com']]));
    const run = await runCli([input, '-o', t.dir.file('o.csv')], { env: { ENRICH_BASE_URL: t.sb.url, ENRICH_API_KEY: 'sk_wrong_key' } });
    expect(run.code).toBe(5);
    expect(run.stderr).toBe('enrich: the service refused the API key (invalid_token); check ENRICH_API_KEY or --api-key-file, then run the same command\n');
  });
});
