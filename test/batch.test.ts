import { copyFileSync, existsSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { csvText, readCsvFile, readCsvRows, runCli } from './helpers/cli.js';
import { sandboxSuite } from './helpers/sandbox-suite.js';

const KEY = 'sk_test_batch';
const t = sandboxSuite(KEY);
const companies = (n: number, skip = 0) => [...t.sb.directory].slice(skip, skip + n);

describe('a batch against the sandbox', () => {
  it('keeps every row of a messy export in order, columns untouched, buying each company once', async () => {
    await t.sandbox();
    const input = t.dir.file('companies.csv');
    copyFileSync('fixtures/companies.csv', input);
    const out = t.dir.file('out.csv');
    const run = await runCli([input, '-o', out], { env: t.env() });
    expect(run.stderr).toContain('enrich: done');
    expect(run.code).toBe(0);

    const inRows = readCsvRows(input);
    const outRows = readCsvRows(out);
    expect(outRows).toHaveLength(inRows.length);
    const width = (inRows[0] as string[]).length;
    outRows.forEach((row, i) => expect(row.slice(0, width)).toStrictEqual(inRows[i]));
    expect(outRows[0]?.slice(width, width + 6)).toStrictEqual(['enrich_status', 'enrich_error', 'enrich_source', 'enrich_bought_at', 'company_domain', 'company_name']);
    // The output mirrors the input's byte-order mark, so a spreadsheet reads it as UTF-8.
    expect(readFileSync(out).subarray(0, 3)).toStrictEqual(Buffer.from([0xef, 0xbb, 0xbf]));

    const results = readCsvFile(out);
    const byStatus = (s: string) => results.filter((r) => r['enrich_status'] === s);
    expect(byStatus('invalid').map((r) => r[' Company Website '])).toEqual(
      expect.arrayContaining(['', 'N/A', 'localhost', 'co.uk', '192.168.0.10', 'not a website', 'tbd', 'https://']),
    );
    expect(byStatus('no_match').length).toBeGreaterThanOrEqual(5);
    expect(byStatus('error')).toHaveLength(0);
    for (const r of byStatus('matched')) {
      expect(r['company_domain']).not.toBe('');
      expect(r['company_last_updated']).toMatch(/^\d{4}-\d\d-\d\dT/);
    }

    // Every canonical company charged exactly once; nothing that missed was ever sent to enrich.
    const charged = t.sb.chargesByDomain(KEY);
    const matchedDomains = new Set(byStatus('matched').map((r) => r['company_domain']));
    expect(new Set(charged.keys())).toStrictEqual(matchedDomains);
    for (const n of charged.values()) expect(n).toBe(1);
    for (const domain of t.sb.stats.enrichCalls.keys()) expect(matchedDomains.has(domain)).toBe(true);
    for (const n of t.sb.stats.matchCalls.values()) expect(n).toBe(1);
  });

  it('matches each domain once and enriches each company once, across spellings and aliases', async () => {
    await t.sandbox();
    const c = [...t.sb.directory].find((x) => x.aliases.length > 0);
    if (c === undefined) throw new Error('no alias in fixtures');
    const alias = c.aliases[0] as string;
    const spellings = [c.domain, `https://www.${c.domain}/about`, c.domain.toUpperCase(), `shop.${c.domain}`, alias, `http://www.${alias}/x`, ` ${c.domain}. `];
    const input = t.dir.file('in.csv', csvText([['Website'], ...spellings.map((s) => [s])]));
    const out = t.dir.file('out.csv');
    expect((await runCli([input, '-o', out], { env: t.env() })).code).toBe(0);
    const rows = readCsvFile(out);
    expect(rows.map((r) => r['enrich_status'])).toStrictEqual(spellings.map(() => 'matched'));
    expect(new Set(rows.map((r) => r['company_domain']))).toStrictEqual(new Set([c.domain]));
    expect(rows.map((r) => r['Website'])).toStrictEqual(spellings);
    expect([...t.sb.stats.matchCalls.entries()].sort()).toStrictEqual([[alias, 1], [c.domain, 1]].sort());
    expect([...t.sb.chargesByDomain(KEY)]).toStrictEqual([[c.domain, 1]]);
  });

  it('dry-run spends nothing and estimates exactly what the real run then spends', async () => {
    await t.sandbox();
    const input = t.dir.file('companies.csv');
    copyFileSync('fixtures/companies.csv', input);
    const summaryPath = t.dir.file('dry.json');
    const dry = await runCli([input, '--dry-run', '--summary-json', summaryPath], { env: t.env() });
    expect(dry.code).toBe(0);
    expect(dry.stdout).toBe('');
    expect(t.sb.ledger(KEY)).toHaveLength(0);
    expect(t.sb.stats.enrichCalls.size).toBe(0);
    const estimate = JSON.parse(readFileSync(summaryPath, 'utf8')) as Record<string, unknown>;
    expect(estimate).toMatchObject({ dry_run: true, rows: 166, invalid_rows: 9, credits_charged: 0 });
    const credits = estimate['estimated_credits'] as number;
    expect(credits).toBeGreaterThan(100);
    expect(estimate['estimated_cost_usd']).toStrictEqual({
      starter: Math.round(credits * 5) / 100,
      growth: Math.round(credits * 4.2) / 100,
      scale: Math.round(credits * 3.3) / 100,
    });
    expect(dry.stderr).toContain(`a real run would spend exactly ${credits} credits`);

    const real = await runCli([input, '-o', t.dir.file('out.csv'), '--summary-json', summaryPath], { env: t.env() });
    expect(real.code).toBe(0);
    expect(t.sb.ledger(KEY)).toHaveLength(credits);
    const totals = JSON.parse(readFileSync(summaryPath, 'utf8')) as Record<string, unknown>;
    expect(totals).toMatchObject({ dry_run: false, credits_charged: credits, bought: credits, reused: 0, estimated_credits: 0, errors: 0, skipped: 0 });
    // The dry run's free matches went into the store, so the real run did not ask again.
    for (const n of t.sb.stats.matchCalls.values()) expect(n).toBe(1);
  });

  it('stops at 402 with exit 4 and resumes after a top-up, each company charged once', async () => {
    await t.sandbox({ keys: [{ key: KEY, balance: 3 }] });
    const domains = companies(10).map((c) => c.domain);
    const input = t.dir.file('in.csv', csvText([['domain'], ...domains.map((d) => [d])]));
    const out = t.dir.file('out.csv');
    const first = await runCli([input, '-o', out], { env: t.env() });
    expect(first.code).toBe(4);
    expect(first.stderr).toMatch(/stopped: balance 0, needs 7 more credits; top up and run the same command to finish/);
    const partial = readCsvFile(out);
    expect(partial.filter((r) => r['enrich_status'] === 'matched')).toHaveLength(3);
    expect(partial.filter((r) => r['enrich_status'] === 'skipped').map((r) => r['enrich_error'])).toStrictEqual(Array(7).fill('insufficient_credits'));
    expect(t.sb.ledger(KEY)).toHaveLength(3);

    t.sb.topUp(KEY, 100);
    const second = await runCli([input, '-o', out], { env: t.env() });
    expect(second.code).toBe(0);
    expect(readCsvFile(out).every((r) => r['enrich_status'] === 'matched')).toBe(true);
    const charged = t.sb.chargesByDomain(KEY);
    expect([...charged.keys()].sort()).toStrictEqual([...domains].sort());
    for (const n of charged.values()) expect(n).toBe(1);
  });

  it('never spends past --max-credits, exits 4, and resumes with a higher cap', async () => {
    await t.sandbox();
    const domains = companies(12).map((c) => c.domain);
    const input = t.dir.file('in.csv', csvText([['domain'], ...domains.map((d) => [d])]));
    const out = t.dir.file('out.csv');
    const first = await runCli([input, '-o', out, '--max-credits', '5', '--concurrency', '8'], { env: t.env() });
    expect(first.code).toBe(4);
    expect(first.stderr).toContain('stopped at --max-credits 5 (the cap on this invocation): 7 more credits would finish the job');
    expect(t.sb.ledger(KEY)).toHaveLength(5);

    const second = await runCli([input, '-o', out, '--max-credits', '100'], { env: t.env() });
    expect(second.code).toBe(0);
    expect(t.sb.ledger(KEY)).toHaveLength(12);
    for (const n of t.sb.chargesByDomain(KEY).values()) expect(n).toBe(1);
  });

  it('exits 5 when the key is refused (401) or lacks the scope (403), writing no results', async () => {
    await t.sandbox({ keys: [{ key: KEY }, { key: 'sk_noscope', scopes: [] }] });
    const input = t.dir.file('in.csv', csvText([['domain'], ...companies(3).map((c) => [c.domain])]));
    const out = t.dir.file('out.csv');
    const bad = await runCli([input, '-o', out], { env: t.env({ ENRICH_API_KEY: 'sk_wrong_key_123' }) });
    expect(bad.code).toBe(5);
    expect(bad.stderr).toContain('the service refused the API key (invalid_token)');
    expect(bad.stderr).not.toContain('sk_wrong_key_123');
    expect(existsSync(out)).toBe(false);
    const scope = await runCli([input, '-o', out, '--fresh'], { env: t.env({ ENRICH_API_KEY: 'sk_noscope' }) });
    expect(scope.code).toBe(5);
    expect(scope.stderr).toContain('lacks the search:read scope');
  });

  it('stops with exit 2 and the line number on malformed CSV, before sending anything', async () => {
    await t.sandbox();
    const rows = companies(5).map((c) => `${c.domain},x`);
    const input = t.dir.file('bad.csv', ['domain,note', ...rows.slice(0, 3), 'broken.com', ...rows.slice(3)].join('\n'));
    const run = await runCli([input, '-o', t.dir.file('out.csv')], { env: t.env() });
    expect(run.code).toBe(2);
    expect(run.stderr).toBe(`enrich: ${input}:5: malformed CSV: the row has 1 fields where the header has 2\n`);
    expect(t.sb.stats.requests).toBe(0);
    const unterminated = t.dir.file('q.csv', 'domain,note\na.com,"fine"\nb.com,"never closed\nc.com,x\n');
    const q = await runCli([unterminated], { env: t.env() });
    expect(q.code).toBe(2);
    expect(q.stderr).toContain(':3: malformed CSV: a quoted field in the row starting here is never closed');
    expect(t.sb.stats.requests).toBe(0);
  });

  it('exits 2 naming the headers when no column holds domains', async () => {
    await t.sandbox();
    const input = t.dir.file('in.csv', csvText([['Name', 'Owner'], ['Acme', 'Ana']]));
    const run = await runCli([input], { env: t.env() });
    expect(run.code).toBe(2);
    expect(run.stderr).toBe('enrich: cannot tell which column holds the domains; pass --column <name>. The header has: "Name", "Owner"\n');
    expect(t.sb.stats.requests).toBe(0);
  });

  it('reads stdin, writes JSONL to stdout, and a plain list of domains needs no header', async () => {
    await t.sandbox();
    const [a, b] = companies(2).map((c) => c.domain);
    const run = await runCli(['-', '--format', 'jsonl', '--quiet', '--store', t.dir.file('j')], { env: t.env(), stdin: `${a}\nhttps://${b}/\nnowhere-at-all.com\n` });
    expect(run.code).toBe(0);
    const lines = run.stdout.trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines.map((l) => [l['domain'], l['enrich_status']])).toStrictEqual([
      [a, 'matched'],
      [`https://${b}/`, 'matched'],
      ['nowhere-at-all.com', 'no_match'],
    ]);
    expect(Array.isArray(lines[0]?.['company_specialties'])).toBe(true);
    expect(run.stderr).toBe('');
  });

  it('writes the summary JSON with the contract keys', async () => {
    await t.sandbox();
    const input = t.dir.file('in.csv', csvText([['domain'], ...companies(4).map((c) => [c.domain]), ['co.uk'], ['nobody-here.io']]));
    const run = await runCli([input, '-o', t.dir.file('out.csv'), '--summary-json', '-'], { env: t.env() });
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout)).toMatchObject({
      rows: 6,
      invalid_rows: 1,
      unique_domains: 5,
      matched: 4,
      no_match: 1,
      errors: 0,
      skipped: 0,
      credits_charged: 4,
      bought: 4,
      reused: 0,
      credits_saved: 0,
      credits_remaining: 10_000 - 4,
      estimated_credits: 0,
    });
  });

  it('refuses to send the key over plain http to another host', async () => {
    await t.sandbox();
    const input = t.dir.file('in.csv', csvText([['domain'], ['a.com']]));
    const run = await runCli([input], { env: t.env({ ENRICH_BASE_URL: 'http://data.example.com' }) });
    expect(run.code).toBe(2);
    expect(run.stderr).toBe('enrich: refusing to send the API key over plain http to data.example.com; use https:// (plain http is allowed only to this machine)\n');
  });
});

describe('refused before any work', () => {
  it('names a missing folder for -o or --summary-json, with exit 2', async () => {
    await t.sandbox();
    const input = t.dir.file('in.csv', csvText([['domain'], ['a.com']]));
    const noOut = await runCli([input, '-o', `${t.dir.path}/missing/out.csv`], { env: t.env() });
    expect(noOut).toMatchObject({ code: 2, stderr: `enrich: -o ${t.dir.path}/missing/out.csv: the folder ${t.dir.path}/missing does not exist\n` });
    const noSummary = await runCli([input, '-o', t.dir.file('o.csv'), '--summary-json', `${t.dir.path}/nope/s.json`], { env: t.env() });
    expect(noSummary.code).toBe(2);
    expect(noSummary.stderr).toContain('--summary-json');
    expect(t.sb.stats.requests).toBe(0);
  });
});

describe('paths that would destroy something are refused up front', () => {
  it('refuses one file in two roles: results over the store or input, a summary over the input', async () => {
    await t.sandbox();
    const input = t.dir.file('in.csv', csvText([['domain'], ['a.com']]));
    const same = t.dir.file('same.csv');
    const overStore = await runCli([input, '--store', same, '-o', same], { env: t.env() });
    expect(overStore).toMatchObject({ code: 2, stderr: `enrich: -o and the store are the same file (${same}); give each its own path\n` });
    const overInput = await runCli([input, '-o', t.dir.file('o.csv'), '--summary-json', input], { env: t.env() });
    expect(overInput.code).toBe(2);
    expect(overInput.stderr).toContain('--summary-json and the input are the same file');
    const storeFromEnv = await runCli([input, '-o', same], { env: t.env({ ENRICH_STORE: same }) });
    expect(storeFromEnv.stderr).toContain('are the same file');
    // A dangling symlink that points at the store is the store too.
    const link = t.dir.file('link.csv');
    symlinkSync(same, link);
    const overLink = await runCli([input, '-o', link, '--store', same], { env: t.env() });
    expect(overLink.stderr).toContain('are the same file');
    expect(t.sb.stats.requests).toBe(0);
  });

  it('refuses a directory as --journal', async () => {
    await t.sandbox();
    const input = t.dir.file('in.csv', csvText([['domain'], ['a.com']]));
    const run = await runCli([input, '--journal', t.dir.path], { env: t.env() });
    expect(run).toMatchObject({ code: 2, stderr: `enrich: --journal ${t.dir.path} is a directory; give the path of a journal written by enrich 0.1\n` });
    const store = await runCli([input, '--store', t.dir.path], { env: t.env() });
    expect(store).toMatchObject({ code: 2, stderr: `enrich: the store ${t.dir.path} is a directory; give a file path with --store or ENRICH_STORE\n` });
  });
});

describe('dry runs and their output', () => {
  it('writes found names to -o when asked, and nothing to stdout when not', async () => {
    await t.sandbox();
    const c = companies(1)[0] as { domain: string; name: string };
    const input = t.dir.file('in.csv', csvText([['domain'], [c.domain], ['nobody-here.io'], ['co.uk']]));
    const quiet = await runCli([input, '--dry-run'], { env: t.env() });
    expect(quiet.code).toBe(0);
    expect(quiet.stdout).toBe('');
    const out = t.dir.file('dry.csv');
    expect((await runCli([input, '--dry-run', '-o', out], { env: t.env() })).code).toBe(0);
    const rows = readCsvFile(out);
    expect(rows.map((r) => [r['enrich_status'], r['company_domain'], r['company_name'], r['company_industry']])).toStrictEqual([
      ['found', c.domain, c.name, ''],
      ['no_match', '', '', ''],
      ['invalid', '', '', ''],
    ]);
    expect(t.sb.ledger(KEY)).toHaveLength(0);
  });
});

describe('odd inputs', () => {
  it('warns about a file that is not UTF-8, and still copies its rows unchanged', async () => {
    await t.sandbox();
    const input = t.dir.file('latin1.csv');
    writeFileSync(input, Buffer.from('name,domain\nCaf\xe9 Ren\xe9,nobody-x.fr\n', 'latin1'));
    const out = t.dir.file('latin1.out.csv');
    const run = await runCli([input, '-o', out], { env: t.env() });
    expect(run.code).toBe(0);
    expect(run.stderr).toMatch(/latin1\.csv is not UTF-8 \(Latin-1 or Windows-1252\?\)/);
    expect(readFileSync(out).includes(Buffer.from('Caf\xe9 Ren\xe9,nobody-x.fr,no_match', 'latin1'))).toBe(true);
  });

  it('finds a file not UTF-8 beyond the sample its format is read from, and keeps its encoding', async () => {
    await t.sandbox();
    const input = t.dir.file('late-latin1.csv');
    const store = t.dir.file('late.db');
    // Over 64 KiB of ASCII first, then a Latin-1 row naming a company whose name has an umlaut.
    const rows = Array.from({ length: 3000 }, (_, i) => `Acme ${i},nobody-late-${i}.com\n`).join('');
    writeFileSync(input, Buffer.concat([Buffer.from(`Firma,Website\n${rows}`), Buffer.from('M\xfcller,xn--mllerlabs-q9a.de\n', 'latin1')]));
    for (const pass of ['scanned', 'from the cached scan']) {
      const out = t.dir.file(`late-${pass.length}.csv`);
      const run = await runCli([input, '-o', out, '--store', store], { env: t.env() });
      expect(run.code, pass).toBe(0);
      expect(run.stderr, pass).toContain('late-latin1.csv is not UTF-8 (from line 3002) (Latin-1 or Windows-1252?)');
      const last = readFileSync(out).subarray(-400);
      expect(last.includes(Buffer.from('M\xfcller,xn--mllerlabs-q9a.de,matched', 'latin1')), pass).toBe(true);
      expect(last.includes(Buffer.from('M\xfcller Labs GmbH', 'latin1')), pass).toBe(true);
    }
  });

  it('takes --column with a headerless list of domains', async () => {
    await t.sandbox();
    const [a] = companies(1).map((c) => c.domain);
    const run = await runCli(['-', '--column', 'website', '--store', t.dir.file('j'), '--quiet'], { env: t.env(), stdin: `${a}\nnobody-y.com\n` });
    expect(run.code).toBe(0);
    expect(run.stdout.split('\n')[0]).toMatch(/^website,enrich_status/);
  });
});
