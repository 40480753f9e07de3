import { existsSync, readFileSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Summary } from '../src/pipeline/summary.js';
import { csvText, readCsvFile, readCsvRows, runCli, tempDir } from './helpers/cli.js';
import { liveTerminal, type LiveTerminal } from './helpers/pty.js';
import { startSandbox, type Sandbox } from '../src/sandbox/index.js';

const ASK_KEY = 'sk_test_question_0123456789';

/**
 * Issue 22, money as finance reads it: a month priced with what this service's runs already spent,
 * one answer first, the cap honoured by the estimate, a dry run that cannot destroy results, spend
 * and savings counted by company, and a question before a large spend on a terminal only.
 */
let dir: ReturnType<typeof tempDir>;
const FIXTURE = 'fixtures/companies.csv';
beforeAll(() => {
  dir = tempDir();
});
afterAll(() => dir.cleanup());

let n = 0;
const freshStore = (): string => dir.file(`s${n++}.db`);
const summaryOf = (path: string): Summary => JSON.parse(readFileSync(path, 'utf8')) as Summary;

async function run(args: string[]): Promise<{ code: number; stderr: string; summary: Summary }> {
  const json = dir.file(`sum${n++}.json`);
  const r = await runCli([...args, '--sandbox', '--summary-json', json]);
  return { code: r.code, stderr: r.stderr, summary: summaryOf(json) };
}

describe('the dry run prices the month, with what was spent in it before', () => {
  // Per-plan figures stay in the JSON.
  it('leads with what the run adds to the bill, counts earlier spend, says what it cannot see', async () => {
    const store = freshStore();
    const first = await run([FIXTURE, '--store', store, '--dry-run']);
    expect(first.code, first.stderr).toBe(0);
    expect(first.summary.month).toMatchObject({ earlier_credits: 0, run_credits: 138, credits: 138, cheapest_plan: 'Starter', bill_usd: 99, adds_usd: 99 });
    expect(first.summary.month?.since).toMatch(/^\d{4}-\d{2}-01T00:00:00\.000Z$/);
    expect(first.stderr).toMatch(/\n {2}adds to bill +\$99 +to this month's bill on its cheapest plan \(\$0 -> \$99\)\n/);
    // Per-plan overage figures are no plan's bill: in the JSON, not on the screen (issue 36).
    expect(first.stderr).not.toContain('at plan rates');
    expect(first.summary.estimated_cost_usd).toStrictEqual({ starter: 6.9, growth: 5.8, scale: 4.55 });
    expect(first.stderr).toMatch(/not counted .*other tools on the same account.*rolled over/);

    // 50 bought for real, then the dry run prices the rest on top of them.
    const some = await run([FIXTURE, '--store', store, '-o', dir.file('some.csv'), '--max-credits', '50']);
    expect(some.code, some.stderr).toBe(4);
    expect(some.summary.month).toMatchObject({ earlier_credits: 0, run_credits: 50, credits: 50, cheapest_plan: 'Free' });
    const rest = await run([FIXTURE, '--store', store, '--dry-run']);
    expect(rest.summary).toMatchObject({ estimated_credits: 88, reused: 50 });
    expect(rest.summary.month).toMatchObject({ earlier_credits: 50, run_credits: 88, credits: 138, cheapest_plan: 'Starter', bill_before_usd: 0, bill_usd: 99, adds_usd: 99 });
    expect(rest.stderr).toMatch(/this month +138 +credits since \S+ UTC \(50 spent earlier by this service's runs \+ 88 this run\)/);
  });

  it('honours --max-credits in the estimate and says how many companies it leaves', async () => {
    const r = await run([FIXTURE, '--store', freshStore(), '--dry-run', '--max-credits', '100']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.summary).toMatchObject({ estimated_credits: 100, left_by_cap: 38 });
    expect(r.summary.month).toMatchObject({ run_credits: 100 });
    expect(r.stderr).toContain('enrich: a real run would spend 100 credits, the --max-credits cap, and leave 38 companies for a later run; drop --dry-run to go ahead');
    expect(r.stderr).not.toContain('exactly');
  });
});

describe("a dry run's results", () => {
  it('never replace an existing -o file unless asked, and say "found" for a match not bought', async () => {
    const store = freshStore();
    const out = dir.file('real.csv', 'last night,s results\n');
    const refused = await runCli([FIXTURE, '--sandbox', '--store', store, '--dry-run', '-o', out]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toBe(`enrich: ${out} exists, and a dry run would replace it with estimates; give another -o, or add --overwrite\n`);
    expect(readFileSync(out, 'utf8')).toBe('last night,s results\n');

    // Nor the totals a real run wrote.
    const totals = dir.file('run.json', '{"credits_charged":138}\n');
    const kept = await runCli([FIXTURE, '--sandbox', '--store', store, '--dry-run', '--summary-json', totals]);
    expect(kept.code).toBe(2);
    expect(kept.stderr).toBe(`enrich: ${totals} exists, and a dry run would replace it with estimates; give another --summary-json, or add --overwrite\n`);
    expect(readFileSync(totals, 'utf8')).toBe('{"credits_charged":138}\n');
    // A nightly estimate replaces its own estimate of the night before.
    const estimate = dir.file('estimate.json');
    for (let night = 0; night < 2; night++) {
      const r = await runCli([FIXTURE, '--sandbox', '--store', store, '--dry-run', '--summary-json', estimate]);
      expect(r.code, r.stderr).toBe(0);
    }
    expect(JSON.parse(readFileSync(estimate, 'utf8'))).toMatchObject({ dry_run: true });

    const ok = await runCli([FIXTURE, '--sandbox', '--store', store, '--dry-run', '-o', out, '--overwrite']);
    expect(ok.code, ok.stderr).toBe(0);
    const rows = readCsvFile(out);
    expect(rows.filter((r) => r['enrich_status'] === 'found')).toHaveLength(152);
    expect(rows.filter((r) => r['enrich_status'] === 'matched')).toHaveLength(0);
    expect(rows.find((r) => r['enrich_status'] === 'found')).toMatchObject({ enrich_source: '', company_description: '' });
    expect(rows.find((r) => r['enrich_status'] === 'found')?.['company_domain']).not.toBe('');
  });
});

describe('spend and savings are counted by company', () => {
  it('marks only the first row of a company bought; repeats say so', async () => {
    const rows = readCsvRows(FIXTURE);
    const header = rows[0] as string[];
    // The demo file three times over: 3 rows for each company, one credit each.
    const input = dir.file('thrice.csv', csvText([header, ...rows.slice(1), ...rows.slice(1), ...rows.slice(1)]));
    const out = dir.file('thrice-out.csv');
    const r = await run([input, '--store', freshStore(), '-o', out]);
    expect(r.code, r.stderr).toBe(0);
    const written = readCsvFile(out);
    expect(written.filter((x) => x['enrich_source'] === 'bought')).toHaveLength(r.summary.credits_charged);
    expect(r.summary.credits_charged).toBe(138);
    expect(written.filter((x) => x['enrich_source'] === 'repeat').length).toBe(152 * 3 - 138);
  });

  it('"saved" counts only what this account would have paid again, once per input', async () => {
    const store = freshStore();
    const domains = (from: number, to: number): string[][] => readCsvRows(FIXTURE).slice(1 + from, 1 + to);
    const header = readCsvRows(FIXTURE)[0] as string[];
    const a = dir.file('a.csv', csvText([header, ...domains(0, 40)]));
    const first = await run([a, '--store', store, '-o', dir.file('a-out.csv')]);
    expect(first.summary.credits_saved).toBe(0);
    // The same file again (a resume, a daily cron): reused, nothing "saved".
    const again = await run([a, '--store', store, '-o', dir.file('a-out.csv')]);
    expect(again.summary).toMatchObject({ bought: 0, credits_saved: 0 });
    expect(again.summary.reused).toBeGreaterThan(0);
    // Another export naming the same companies, and more: those bought by the other job are saved, once.
    const b = dir.file('b.csv', csvText([header, ...domains(20, 60)]));
    const other = await run([b, '--store', store, '-o', dir.file('b-out.csv')]);
    expect(other.summary.credits_saved).toBeGreaterThan(0);
    expect(other.summary.credits_saved).toBe(other.summary.reused);
    const tomorrow = await run([b, '--store', store, '-o', dir.file('b-out.csv')]);
    expect(tomorrow.summary).toMatchObject({ bought: 0, credits_saved: 0 });
  });
});

describe('a question before a large spend, on a terminal only', () => {
  let live: LiveTerminal | undefined;
  let sb: Sandbox;
  // A service of real credits: against the embedded sandbox's play credits, nothing is asked.
  let service: Record<string, string>;
  beforeAll(async () => {
    sb = await startSandbox({ keys: [{ key: ASK_KEY }] });
    service = { ENRICH_BASE_URL: sb.url, ENRICH_API_KEY: ASK_KEY };
  });
  afterAll(() => sb.close());
  afterEach(() => live?.kill());

  it('never asks against the embedded sandbox: the demo just runs', async () => {
    live = liveTerminal([FIXTURE, '--sandbox', '--store', freshStore(), '-o', dir.file('demo.csv')], {}, 200, dir.file('tty-demo'));
    expect(await live.exited).toBe(0);
    expect(live.output()).not.toContain('[y/N]');
    expect(live.output()).toMatch(/bought +138/);
  });

  it('asks with the exact count and the month, buys nothing on no, and --yes skips it', async () => {
    const store = freshStore();
    const out = dir.file('asked.csv');
    live = liveTerminal([FIXTURE, '--store', store, '-o', out], service, 200, dir.file('tty-ask'));
    await live.waitForScreen((s) => s.some((l) => l.includes('[y/N]')));
    expect(live.output()).toContain("enrich: buy 138 companies for 138 credits? This month's bill becomes $99 on Starter (adds $99). [y/N]");
    live.type('n\r');
    expect(await live.exited).toBe(4);
    expect(live.output()).toContain('nothing bought: you answered no');
    // Every row was matched and would be bought: said so, not "skipped" (issue 36).
    expect(live.output()).toMatch(/rows found +152 +\(would be bought\)/);
    expect(live.output()).toMatch(/rows skipped +0\b/);
    expect(existsSync(out)).toBe(false);

    live = liveTerminal([FIXTURE, '--store', store, '-o', out, '--yes'], service, 200, dir.file('tty-yes'));
    expect(await live.exited).toBe(0);
    expect(live.output()).not.toContain('[y/N]');
    expect(live.output()).toContain('enrich: done');
  });

  it('names the monthly budget and what it leaves, and that the run stops there', async () => {
    const store = freshStore();
    expect((await runCli(['budget', 'set', '120', '--store', store])).code).toBe(0);
    live = liveTerminal([FIXTURE, '--store', store, '-o', dir.file('capped.csv')], service, 260, dir.file('tty-cap'));
    await live.waitForScreen((s) => s.some((l) => l.includes('[y/N]')));
    // The bill is of what the run can buy: 120 credits on Starter (2,000 included) is its $99.
    expect(live.output()).toContain("enrich: buy 120 of 138 companies for 120 credits? This month's bill becomes $99 on Starter (adds $99). The store's monthly budget has 120 credits left of 120, so 18 companies wait for more room. [y/N]");
    live.type('n\r');
    expect(await live.exited).toBe(4);
  });

  it('answered yes, buys; without a terminal never asks', async () => {
    const store = freshStore();
    live = liveTerminal([FIXTURE, '--store', store, '-o', dir.file('yes.csv')], service, 200, dir.file('tty-y'));
    await live.waitForScreen((s) => s.some((l) => l.includes('[y/N]')));
    live.type('y\r');
    expect(await live.exited).toBe(0);
    expect(live.output()).toMatch(/bought +138/);
    // A pipe: the documented behaviour, no question.
    const piped = await runCli([FIXTURE, '--sandbox', '--store', freshStore(), '-o', dir.file('piped.csv')]);
    expect(piped.code).toBe(0);
    expect(piped.stderr).not.toContain('[y/N]');
  });
});

