import { existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'libsql';
import { describe, expect, it } from 'vitest';
import { csvText, readCsvFile, runCli } from './helpers/cli.js';
import { spawnCli } from './helpers/spawn.js';
import { sandboxSuite } from './helpers/sandbox-suite.js';

/**
 * The purchase store (issue 9), over real HTTP against the sandbox, whose ledger is the proof:
 * what is bought is never bought again, across runs, inputs, days and concurrent processes.
 */
const KEY = 'sk_test_store_0123456789';
const t = sandboxSuite(KEY);
const domains = (n: number, skip = 0): string[] => [...t.sb.directory].slice(skip, skip + n).map((c) => c.domain);
const storePath = (): string => join(process.env['XDG_STATE_HOME'] as string, 'enrich', 'store.db');

function expectEachChargedOnce(expected: readonly string[]): void {
  const charged = t.sb.chargesByDomain(KEY);
  expect([...charged.keys()].sort()).toStrictEqual([...new Set(expected)].sort());
  for (const [domain, n] of charged) expect(n, domain).toBe(1);
}

let summaries = 0;
async function summaryOf(args: string[], extra: Record<string, string> = {}, stdin?: string): Promise<Record<string, unknown>> {
  // A file of its own each time: a dry run never replaces a summary a real run wrote.
  const path = t.dir.file(`summary-${summaries++}.json`);
  const run = await runCli([...args, '--summary-json', path, '--quiet'], { env: t.env(extra), ...(stdin === undefined ? {} : { stdin }) });
  expect(run.code, run.stderr).toBe(0);
  return JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>;
}

describe('the store remembers what was bought', () => {
  it('next week\'s re-export, re-sorted with one new row, buys exactly that one company', async () => {
    await t.sandbox();
    const week1 = [...domains(30), 'nobody-week.com'];
    const input = t.dir.file('crm.csv', csvText([['Website'], ...week1.map((d) => [d])]));
    expect(await summaryOf([input, '-o', t.dir.file('out.csv')])).toMatchObject({ bought: 30, reused: 0, credits_charged: 30 });
    // The next export: another order, another column name, one new company.
    const week2 = [domains(1, 30)[0] as string, ...[...week1].reverse()];
    writeFileSync(input, csvText([['Company Domain'], ...week2.map((d) => [d])]));
    const second = await summaryOf([input, '-o', t.dir.file('out.csv')]);
    expect(second).toMatchObject({ bought: 1, reused: 30, credits_saved: 30, credits_charged: 1, matched: 31, no_match: 1 });
    expect(t.sb.ledger(KEY)).toHaveLength(31);
    expectEachChargedOnce(domains(31));
    // Every row is filled, and says where its record came from.
    const rows = readCsvFile(t.dir.file('out.csv'));
    expect(rows.filter((r) => r['enrich_source'] === 'bought').map((r) => r['Company Domain'])).toStrictEqual([week2[0]]);
    expect(rows.filter((r) => r['enrich_source'] === 'store')).toHaveLength(30);
    expect(rows.every((r) => r['enrich_status'] !== 'matched' || r['company_name'] !== '')).toBe(true);
  });

  it('a small file against a bigger store buys its new company and reuses the held one', async () => {
    await t.sandbox();
    const held = domains(30);
    expect(await summaryOf([t.dir.file('big.csv', csvText([['domain'], ...held.map((d) => [d])])), '-o', t.dir.file('big.out.csv')])).toMatchObject({ bought: 30 });
    // Few companies next to the store: each is looked up by its key (not by reading the table).
    const fresh = domains(1, 30)[0] as string;
    const small = t.dir.file('small.csv', csvText([['domain'], [held[5] as string], [fresh]]));
    expect(await summaryOf([small, '--dry-run'])).toMatchObject({ estimated_credits: 1 });
    expect((await runCli([small, '--dry-run'], { env: t.env() })).stderr).toContain('a real run would spend exactly 1 credit; drop --dry-run to go ahead');
    expect(await summaryOf([small, '-o', t.dir.file('small.out.csv')])).toMatchObject({ bought: 1, reused: 1, credits_charged: 1 });
    expectEachChargedOnce(domains(31));
    const rows = readCsvFile(t.dir.file('small.out.csv'));
    expect(rows.map((r) => [r['domain'], r['enrich_source'], r['company_domain']])).toStrictEqual([
      [held[5], 'store', held[5]],
      [fresh, 'bought', fresh],
    ]);
  });

  it('two files that share companies buy their union once', async () => {
    await t.sandbox();
    const a = t.dir.file('a.csv', csvText([['domain'], ...domains(40).map((d) => [d])]));
    const b = t.dir.file('b.csv', csvText([['website'], ...domains(40, 20).map((d) => [`https://www.${d}/`])]));
    expect(await summaryOf([a, '-o', t.dir.file('a.out.csv')])).toMatchObject({ bought: 40 });
    expect(await summaryOf([b, '-o', t.dir.file('b.out.csv')])).toMatchObject({ bought: 20, reused: 20 });
    expectEachChargedOnce(domains(60));
  });

  it('seven daily pipes into the same -o, shifted a few domains a day, buy each company once', async () => {
    await t.sandbox();
    const out = t.dir.file('daily.jsonl');
    for (let day = 0; day < 7; day++) {
      const today = domains(12, day * 4);
      const summary = await summaryOf(['-', '-o', out, '--format', 'jsonl'], {}, today.join('\n'));
      expect(summary).toMatchObject({ rows: 12, matched: 12, bought: day === 0 ? 12 : 4, reused: day === 0 ? 0 : 8 });
      expect(readFileSync(out, 'utf8').trim().split('\n')).toHaveLength(12);
    }
    expectEachChargedOnce(domains(12 + 6 * 4));
  });

  it('--max-age buys again the records older than it, under new keys; the dry run prices it', async () => {
    await t.sandbox();
    const list = domains(10);
    const input = t.dir.file('in.csv', csvText([['domain'], ...list.map((d) => [d])]));
    expect(await summaryOf([input, '-o', t.dir.file('o.csv')])).toMatchObject({ bought: 10 });
    // Four records were bought 40 days ago.
    const stale = list.slice(0, 4);
    const db = new Database(storePath());
    const day = 86_400_000;
    db.prepare(`UPDATE companies SET bought_at = bought_at - ? WHERE domain IN (${stale.map(() => '?').join(',')})`).run(40 * day, ...stale);
    db.close();

    const dry = await runCli([input, '--dry-run', '--max-age', '30d'], { env: t.env() });
    expect(dry.code).toBe(0);
    expect(dry.stderr).toContain('a real run would spend exactly 4 credits (4 of them refresh stale records)');
    // Without the flag nothing held is bought again.
    expect(await summaryOf([input, '-o', t.dir.file('o.csv')])).toMatchObject({ bought: 0, reused: 10 });
    expect(await summaryOf([input, '-o', t.dir.file('o.csv'), '--max-age', '30d'])).toMatchObject({ bought: 4, reused: 6, credits_charged: 4 });
    const charged = t.sb.chargesByDomain(KEY);
    for (const d of list) expect(charged.get(d), d).toBe(stale.includes(d) ? 2 : 1);
    // A refresh is a new unit of work: the service saw a new key, not a replay of the old one.
    expect(t.sb.stats.replays).toBe(0);
    // And it is fresh now: the same flag buys nothing more.
    expect(await summaryOf([input, '-o', t.dir.file('o.csv'), '--max-age', '30d'])).toMatchObject({ bought: 0, reused: 10 });
  });

  it('two runs at once over overlapping inputs buy each company once between them', async () => {
    await t.sandbox({ latencyMs: 20 });
    const a = t.dir.file('a.csv', csvText([['domain'], ...domains(50).map((d) => [d])]));
    const b = t.dir.file('b.csv', csvText([['domain'], ...domains(50, 25).map((d) => [d])]));
    const first = spawnCli([a, '-o', t.dir.file('a.out.csv'), '--quiet', '--concurrency', '4'], { env: t.env() });
    const second = spawnCli([b, '-o', t.dir.file('b.out.csv'), '--quiet', '--concurrency', '4'], { env: t.env() });
    expect(await first.exited, first.stderr()).toBe(0);
    expect(await second.exited, second.stderr()).toBe(0);
    expectEachChargedOnce(domains(75));
    for (const out of ['a.out.csv', 'b.out.csv']) {
      const rows = readCsvFile(t.dir.file(out));
      expect(rows.every((r) => r['enrich_status'] === 'matched' && r['company_name'] !== ''), out).toBe(true);
    }
  });

  it('never refuses a changed input and keeps the key out of the store, which is owner-only', async () => {
    await t.sandbox();
    const input = t.dir.file('in.csv', csvText([['domain'], ...domains(3).map((d) => [d])]));
    expect((await runCli([input, '-o', t.dir.file('o.csv')], { env: t.env() })).code).toBe(0);
    writeFileSync(input, csvText([['domain'], ...domains(4).map((d) => [d])]));
    expect((await runCli([input, '-o', t.dir.file('o.csv')], { env: t.env() })).code).toBe(0);
    const { statSync } = await import('node:fs');
    expect(statSync(storePath()).mode & 0o777).toBe(0o600);
    expect(readFileSync(storePath()).includes(KEY)).toBe(false);
  });
});

describe('enrich ledger', () => {
  it('shows holdings and runs, exports every record, and prunes old ones to be bought again', async () => {
    await t.sandbox();
    const input = t.dir.file('in.csv', csvText([['domain'], ...domains(5).map((d) => [d]), ['nobody-ledger.com']]));
    expect((await runCli([input, '-o', t.dir.file('o.csv')], { env: t.env() })).code).toBe(0);
    expect((await runCli([input, '-o', t.dir.file('o.csv')], { env: t.env() })).code).toBe(0);

    const show = await runCli(['ledger', '--json']);
    const held = JSON.parse(show.stdout) as { services: { service: string; companies: number; credits: number; runs: number; misses: number }[] };
    expect(held.services).toMatchObject([{ service: `${t.sb.url}/api/v1/public`, companies: 5, credits: 5, runs: 2, misses: 1 }]);
    const { runs } = JSON.parse((await runCli(['ledger', 'runs', '--json'])).stdout) as { runs: { credits: number; bought: number; reused: number }[] };
    expect(runs.map((r) => [r.credits, r.bought, r.reused])).toStrictEqual([
      [0, 0, 5],
      [5, 5, 0],
    ]);
    const exported = await runCli(['ledger', 'export', '--format', 'jsonl']);
    const records = exported.stdout.trim().split('\n').map((l) => JSON.parse(l) as { company_domain: string });
    expect(records.map((r) => r.company_domain).sort()).toStrictEqual(domains(5).sort());
    const csv = await runCli(['ledger', 'export', '-o', t.dir.file('held.csv')]);
    expect(csv.code).toBe(0);
    expect(readCsvFile(t.dir.file('held.csv')).map((r) => r['company_domain']).sort()).toStrictEqual(domains(5).sort());

    expect((await runCli(['ledger', 'prune', '--older-than', '0d', '--dry-run'])).stdout).toContain('would forget 5 companies');
    expect((await runCli(['ledger', 'prune', '--older-than', '0d'])).stdout).toMatch(/^forgot 5 companies bought and \d+ lookups? made before \d{4}-\d\d-\d\d \d\d:\d\d UTC; open purchases are always kept\n/);
    expect((await runCli([input, '-o', t.dir.file('o.csv')], { env: t.env() })).code).toBe(0);
    // Bought again, and not as a replay of the keys used before the prune.
    expect(t.sb.ledger(KEY)).toHaveLength(10);
    expect(t.sb.stats.replays).toBe(0);
  });
});

describe('enrich ledger without a store', () => {
  it('says there is no store at a path that has none, rather than create one there', async () => {
    const typo = t.dir.file('typo.db');
    for (const args of [['ledger'], ['ledger', 'runs'], ['ledger', 'export'], ['ledger', 'prune', '--older-than', '1d'], ['ledger', 'release']]) {
      const run = await runCli([...args, '--store', typo]);
      expect(run, args.join(' ')).toMatchObject({ code: 2, stdout: '' });
      expect(run.stderr).toBe(`enrich: no store at ${typo}: a batch run creates it with its first purchase or lookup; give --store <path> (or ENRICH_STORE) to read another\n`);
      expect(existsSync(typo)).toBe(false);
    }
    // An empty file (a placeholder from mktemp, a truncated copy) is no store either, and stays empty.
    const empty = t.dir.file('empty.db');
    writeFileSync(empty, '');
    const run = await runCli(['ledger', '--store', empty]);
    expect(run).toMatchObject({ code: 2, stdout: '', stderr: `enrich: no store at ${empty}: a batch run creates it with its first purchase or lookup; give --store <path> (or ENRICH_STORE) to read another\n` });
    expect(statSync(empty).size).toBe(0);
  });
});

describe('runs stopped early, and exports', () => {
  it('a --fresh run stopped by Ctrl-C and rerun does not buy twice what it refreshed', async () => {
    await t.sandbox({ latencyMs: 40 });
    const list = domains(16);
    const input = t.dir.file('in.csv', csvText([['domain'], ...list.map((d) => [d])]));
    expect(await summaryOf([input, '-o', t.dir.file('o.csv')])).toMatchObject({ bought: 16 });
    const p = spawnCli([input, '-o', t.dir.file('o.csv'), '--fresh', '--concurrency', '2', '--quiet'], { env: t.env() });
    // Ctrl-C once the refresh has bought a few (progress, not the clock).
    while (t.sb.ledger(KEY).length < 16 + 3) await new Promise((r) => setTimeout(r, 5));
    p.child.kill('SIGINT');
    expect(await p.exited).toBe(130);
    const refreshed = t.sb.ledger(KEY).length - 16;
    expect(refreshed).toBeLessThan(16);
    const rerun = await runCli([input, '-o', t.dir.file('o.csv'), '--fresh', '--quiet'], { env: t.env() });
    expect(rerun.code, rerun.stderr).toBe(0);
    // Each company bought once, then refreshed once: never a third time.
    for (const [domain, n] of t.sb.chargesByDomain(KEY)) expect(n, domain).toBe(2);
    // A later --fresh is a new job: it refreshes all again.
    expect(await summaryOf([input, '-o', t.dir.file('o.csv'), '--fresh'])).toMatchObject({ bought: 16 });
  });

  it('a run stopped by --max-credits leaves nothing "at risk" for what it never sent', async () => {
    await t.sandbox();
    const input = t.dir.file('in.csv', csvText([['domain'], ...domains(10).map((d) => [d])]));
    expect((await runCli([input, '-o', t.dir.file('o.csv'), '--max-credits', '2'], { env: t.env() })).code).toBe(4);
    expect((await runCli(['ledger', 'release'])).stdout).toContain('no purchase is waiting on an unanswered paid call');
    const held = JSON.parse((await runCli(['ledger', '--json'])).stdout) as { services: { at_risk: number }[] };
    expect(held.services[0]?.at_risk).toBe(0);
  });

  it('refuses to export over the store itself, directly or through a symlink', async () => {
    await t.sandbox();
    const input = t.dir.file('in.csv', csvText([['domain'], ...domains(2).map((d) => [d])]));
    expect((await runCli([input, '-o', t.dir.file('o.csv')], { env: t.env() })).code).toBe(0);
    const direct = await runCli(['ledger', 'export', '-o', storePath()]);
    expect(direct).toMatchObject({ code: 2 });
    expect(direct.stderr).toContain('is the store itself');
    const link = t.dir.file('link.csv');
    const { symlinkSync } = await import('node:fs');
    symlinkSync(storePath(), link);
    expect((await runCli(['ledger', 'export', '-o', link])).code).toBe(2);
    expect((await runCli(['ledger', '--json'])).code).toBe(0);
  });
});

describe('enrich ledger release', () => {
  it('lists companies stuck on an unanswered paid call and releases them to buy under new keys', async () => {
    await t.sandbox();
    const [stuck, other] = domains(2) as [string, string];
    // A run that sent stuck's paid call and never heard back, and a later one that resumed it
    // under the same key and did not either (both processes gone).
    const { Store } = await import('../src/store/sqlite/store.js');
    const store = Store.open(storePath(), { tool: 'test' });
    for (let i = 0; i < 2; i++) {
      const records = store.beginRun(`${t.sb.url}/api/v1/public`, { inputName: 'x', inputSha256: 'x', rows: 1, dryRun: false, options: {} });
      await records.append({ type: 'intent', company: stuck, generation: 1, keyVersion: 1, key: 'lost-key-1' }, true);
      await records.append({ type: 'enrich', company: stuck, generation: 1, keyVersion: 1, status: 'error', code: 'network_error', verdict: 'kept', lost: true, at: Date.now() });
      await records.flush();
      store.db.prepare("UPDATE runs SET status = 'killed'").run();
      await records.releaseClaims();
    }
    store.close();

    const list = await runCli(['ledger', 'release']);
    expect(list.stdout).toContain(`${stuck}  (`);
    expect(list.stdout).toContain('1 company waits on a paid call whose answer never came: at most 1 credit at risk');
    const refused = await runCli(['ledger', 'release', other]);
    expect(refused).toMatchObject({ code: 2 });
    expect(refused.stderr).toContain(`nothing to release for ${other}`);
    const released = await runCli(['ledger', 'release', '--all']);
    expect(released.stdout).toContain('released 1 company: the next run buys it under a new key');
    expect((await runCli(['ledger', 'release'])).stdout).toContain('no purchase is waiting on an unanswered paid call');

    const input = t.dir.file('in.csv', csvText([['domain'], [stuck]]));
    expect((await runCli([input, '-o', t.dir.file('o.csv')], { env: t.env() })).code).toBe(0);
    expect(t.sb.ledger(KEY).map((e) => e.idempotencyKey)).toHaveLength(1);
    expect(t.sb.ledger(KEY)[0]?.idempotencyKey).toMatch(/-g1-v2$/);
  });
});

describe('enrich ledger release --all', () => {
  it('leaves a key never resumed here: the next run resumes it under that key, charged once', async () => {
    await t.sandbox();
    const [killed] = domains(1) as [string];
    const { Store } = await import('../src/store/sqlite/store.js');
    const store = Store.open(storePath(), { tool: 'test' });
    const records = store.beginRun(`${t.sb.url}/api/v1/public`, { inputName: 'x', inputSha256: 'x', rows: 1, dryRun: false, options: {} });
    await records.append({ type: 'intent', company: killed, generation: 1, keyVersion: 1, key: 'killed-key-1' }, true);
    await records.flush();
    store.db.prepare("UPDATE runs SET status = 'killed'").run();
    store.close();

    const list = await runCli(['ledger', 'release']);
    expect(list.stdout).toContain(`${killed}  (`);
    expect(list.stdout).toContain('never resumed here');
    expect(list.stdout).toContain('1 of them was never resumed here (no later run here has taken its key up again; or it was copied in): the next run resumes it under the same key, a charged one replayed for free, so --all leaves it');
    const all = await runCli(['ledger', 'release', '--all']);
    expect(all.stdout).toContain('released 0 companies');
    expect(all.stdout).toContain('1 company was never resumed here and is left for the next run to resume under its key');
    const input = t.dir.file('in.csv', csvText([['domain'], [killed]]));
    expect((await runCli([input, '-o', t.dir.file('o.csv')], { env: t.env() })).code).toBe(0);
    expect(t.sb.ledger(KEY).map((e) => e.idempotencyKey)).toStrictEqual(['killed-key-1']);
  });
});

describe('a journal written by enrich 0.1', () => {
  it('is told from a file that is not one: ledger import refuses it, a batch warns and goes on', async () => {
    await t.sandbox();
    const csv = t.dir.file('crm.csv', csvText([['domain'], ...domains(2).map((d) => [d])]));
    // Into a store in a mistyped folder: refused before anything is made there.
    const typo = t.dir.file('tyop/store.db');
    expect(await runCli(['ledger', 'import', csv, '--store', typo])).toMatchObject({ code: 2, stderr: `enrich: the store ${typo}: the folder ${t.dir.file('tyop')} does not exist; create it, or fix --store (or ENRICH_STORE)\n` });
    expect(existsSync(t.dir.file('tyop'))).toBe(false);
    const refused = await runCli(['ledger', 'import', csv, '--store', t.dir.file('fresh.db')]);
    expect(refused).toMatchObject({ code: 2, stdout: '', stderr: `enrich: ${csv} is not a journal written by enrich 0.1 (it does not start with one's header); nothing imported\n` });
    // Refused before the store was opened: none was made.
    expect(existsSync(t.dir.file('fresh.db'))).toBe(false);
    const junk = t.dir.file('crm.csv.enrich-journal', 'not a journal\n');
    const run = await runCli([csv, '-o', t.dir.file('out.csv')], { env: t.env() });
    expect(run.code, run.stderr).toBe(0);
    expect(run.stderr).toContain(`${junk} is not a journal written by enrich 0.1 (it does not start with one's header); nothing imported from it`);
  });

  it('is imported once, nothing bought again; an unfinished purchase resumes under its key', async () => {
    await t.sandbox();
    const input = t.dir.file('crm.csv');
    writeFileSync(input, readFileSync('fixtures/v0.1/crm.csv'));
    // The fixture was written against a sandbox on port 4777: point it at this one.
    const journal = readFileSync('fixtures/v0.1/crm.csv.enrich-journal', 'utf8').replaceAll('http://127.0.0.1:4777', t.sb.url);
    writeFileSync(`${input}.enrich-journal`, journal);
    // 0.1 was killed after sending granite-quill-coffee.ai under its intent's key: the service charged it.
    const lostKey = /"intent","c":"granite-quill-coffee.ai","v":1,"key":"([^"]+)"/.exec(journal)?.[1] as string;
    const lost = await fetch(`${t.sb.url}/api/v1/public/company/enrich`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', 'idempotency-key': lostKey },
      body: JSON.stringify({ domain: 'granite-quill-coffee.ai' }),
    });
    expect(lost.status).toBe(200);

    const run = await runCli([input, '-o', t.dir.file('out.csv')], { env: t.env() });
    expect(run.code, run.stderr).toBe(0);
    expect(run.stderr).toContain('imported 4 companies bought with enrich 0.1');
    expect(run.stderr).toContain('1 unfinished purchase resumes under its own key');
    // Only the company 0.1 never reached was bought; the lost answer was replayed, not charged again.
    expect(t.sb.ledger(KEY).map((e) => e.domain).sort()).toStrictEqual(['granite-quill-coffee.ai', 'granitehavenindustries.de']);
    expect(t.sb.stats.replays).toBe(1);
    const rows = readCsvFile(t.dir.file('out.csv'));
    expect(rows.map((r) => r['enrich_status'])).toStrictEqual([...Array(6).fill('matched'), 'no_match']);
    expect(rows.filter((r) => r['enrich_source'] === 'store')).toHaveLength(4);
    const again = await runCli([input, '-o', t.dir.file('out.csv')], { env: t.env() });
    expect(again.stderr).not.toContain('imported');
    expect(t.sb.ledger(KEY)).toHaveLength(2);
    // 0.1 ran once more on that file: only its new lines are imported, nothing counted twice.
    const credits = (): number => (JSON.parse(readFileSync(t.dir.file('held.json'), 'utf8')) as { services: { credits: number }[] }).services[0]?.credits ?? -1;
    writeFileSync(t.dir.file('held.json'), (await runCli(['ledger', '--json'])).stdout);
    const before = credits();
    const { appendFileSync } = await import('node:fs');
    appendFileSync(`${input}.enrich-journal`, '{"t":"session","n":3,"at":"2026-11-23T09:00:00.000Z","pid":1,"dry_run":false}\n');
    expect((await runCli([input, '-o', t.dir.file('out.csv')], { env: t.env() })).code).toBe(0);
    writeFileSync(t.dir.file('held.json'), (await runCli(['ledger', '--json'])).stdout);
    expect(credits()).toBe(before);
  });
});
