import { readFileSync } from 'node:fs';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { csvText, readCsvFile, runCli, tempDir } from './helpers/cli.js';
import { hostileServer, json, type Hostile } from './helpers/hostile.js';
import { companyRecord } from './helpers/records.js';

/**
 * Paid answers that contradict themselves or the request, and a 422 on a company the free match
 * found: over real HTTP against scripted services, whose count of charges is the proof.
 */
const KEY = 'sk_test_paid_answers_01';
let dir: ReturnType<typeof tempDir>;
let server: Hostile | undefined;
beforeEach(() => {
  dir = tempDir();
});
afterEach(async () => {
  await server?.close();
  server = undefined;
  dir.cleanup();
});

const company = (domain: string, name: string) => companyRecord(domain, { name, website_url: `https://${domain}`, industry: 'Software', employee_count: 10 });

/** A service whose match finds `asked` (as "Co2"), and whose paid answer is `answer(n)` for the n-th paid call. */
async function service(answer: (n: number) => { status: number; body: unknown; charged: number }): Promise<{ charges: () => number; paid: () => number }> {
  let charges = 0;
  let paid = 0;
  server = await hostileServer((req, res) => {
    if (req.method === 'GET') return json(res, 200, { matched: true, credits_charged: 0, company: { domain: 'co2-test.com', name: 'Co2' } });
    const a = answer(++paid);
    charges += a.charged;
    json(res, a.status, a.body);
  });
  return { charges: () => charges, paid: () => paid };
}

async function enrich() {
  const input = dir.file('in.csv', csvText([['domain'], ['co2-test.com'], ['https://www.co2-test.com/about']]));
  const out = dir.file('out.csv');
  const summary = dir.file('summary.json');
  const run = await runCli([input, '-o', out, '--summary-json', summary, '--store', dir.file('store.db')], { env: { ENRICH_BASE_URL: server?.url, ENRICH_API_KEY: KEY } });
  return { run, totals: JSON.parse(readFileSync(summary, 'utf8')) as Record<string, number>, rows: readCsvFile(out) };
}

describe('a paid answer that is not the record of the company bought', () => {
  const cases: [string, unknown][] = [
    ['the record of another company', { matched: true, credits_charged: 1, credits_remaining: 9, company: company('other-co2-test.com', 'Other Co') }],
    ['a charge with matched: false', { matched: false, credits_charged: 1, credits_remaining: 9, company: null }],
    ['a match with company: null', { matched: true, credits_charged: 1, credits_remaining: 9, company: null }],
    ['a match whose company has no name', { matched: true, credits_charged: 1, credits_remaining: 9, company: { ...company('co2-test.com', ''), name: undefined } }],
  ];
  // The credit is spent and nothing is stored.
  it.each(cases)('%s: a bad_response, exit 3; a rerun buys nothing, exit 0', async (_what, body) => {
    const svc = await service(() => ({ status: 200, body, charged: 1 }));
    const first = await enrich();
    expect(first.run.code, first.run.stderr).toBe(3);
    expect(svc.paid()).toBe(1);
    expect(first.totals).toMatchObject({ credits_charged: 1, bought: 0, errors: 2, unusable: 1 });
    for (const row of first.rows) {
      expect(row).toMatchObject({ enrich_status: 'error', enrich_error: 'bad_response', company_domain: 'co2-test.com', company_name: 'Co2', company_website_url: '' });
    }
    expect(first.run.stderr).toContain("1 company has a paid answer that could not be used (bad_response: another company's record, or one that contradicts itself), its credit spent, and it is not bought again before --miss-max-age");
    const exported = await runCli(['ledger', 'export', '--store', dir.file('store.db'), '--format', 'jsonl']);
    expect(exported.stdout).not.toContain('Other Co');
    // Nothing a rerun can clear before --miss-max-age: a daily cron's alert on exit 3 must not fire for it.
    const again = await enrich();
    expect(again.run.code, again.run.stderr).toBe(0);
    expect(svc.paid()).toBe(1);
    expect(again.totals).toMatchObject({ status: 'done', credits_charged: 0, errors: 2, unusable: 1 });
    expect(again.rows.map((r) => r['enrich_error'])).toStrictEqual(['bad_response', 'bad_response']);
    expect(again.run.stderr).toContain('2 rows show bad_response: 1 company whose paid answer an earlier run could not use');
    // A dry run too: its estimate is exact (nothing unanswered), so nothing for a rerun to clear.
    const dry = await runCli([dir.file('in.csv'), '--dry-run', '--quiet', '--store', dir.file('store.db')], { env: { ENRICH_BASE_URL: server?.url, ENRICH_API_KEY: KEY } });
    expect(dry.code, dry.stderr).toBe(0);
  });
});

describe('a refresh whose paid answer is unusable', () => {
  it('is not bought again each run: held back with its older record while a miss is believed', async () => {
    const svc = await service((n) => ({ status: 200, body: { matched: true, credits_charged: 1, credits_remaining: 9, company: company(n === 1 ? 'co2-test.com' : 'other-co2-test.com', n === 1 ? 'Co2' : 'Other Co') }, charged: 1 }));
    const bought = await enrich();
    expect(bought.run.code, bought.run.stderr).toBe(0);
    for (let run = 0; run < 3; run++) {
      const input = dir.file('in.csv');
      const again = await runCli([input, '-o', dir.file('out.csv'), '--store', dir.file('store.db'), '--fresh'], { env: { ENRICH_BASE_URL: server?.url, ENRICH_API_KEY: KEY } });
      // The run that got the unusable answer exits 3; those after it hold the company back, with nothing to retry.
      expect(again.code).toBe(run === 0 ? 3 : 0);
      const rows = readCsvFile(dir.file('out.csv'));
      expect(rows[0]).toMatchObject({ enrich_status: 'error', enrich_error: 'bad_response', company_name: 'Co2', company_website_url: 'https://co2-test.com' });
    }
    // One purchase, one refresh whose answer was unusable; never a third.
    expect(svc.paid()).toBe(2);
  });
});

describe('a 422 from the paid endpoint on a company the free match found', () => {
  it('charges nothing, fails the row for this run, and the rerun asks again and buys it', async () => {
    const svc = await service((n) =>
      n === 1
        ? { status: 422, body: { type: 'x/validation_error', title: 'Invalid', status: 422, code: 'validation_error', detail: 'domain unparseable' }, charged: 0 }
        : { status: 200, body: { matched: true, credits_charged: 1, credits_remaining: 9, company: company('co2-test.com', 'Co2') }, charged: 1 },
    );
    const first = await enrich();
    expect(first.run.code).toBe(3);
    expect(first.rows[0]).toMatchObject({ enrich_status: 'error', enrich_error: 'validation_error' });
    expect(first.run.stderr).toContain('2 rows failed (see enrich_error); run the same command to retry them');
    const again = await enrich();
    expect(again.run.code, again.run.stderr).toBe(0);
    expect(again.rows[0]).toMatchObject({ enrich_status: 'matched', company_name: 'Co2' });
    expect(svc.paid()).toBe(2);
    expect(svc.charges()).toBe(1);
  });
});
