import { appendFileSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mulberry32 } from '../src/sandbox/random.js';
import { startSandbox, type Sandbox, type SandboxOptions } from '../src/sandbox/index.js';
import { csvText, readCsvFile, runCli, tempDir } from './helpers/cli.js';
import { spawnCli } from './helpers/spawn.js';

const KEY = 'sk_test_resume_0123456789';
let dir: ReturnType<typeof tempDir>;
const sandboxes: Sandbox[] = [];

beforeEach(() => {
  dir = tempDir();
});
afterEach(async () => {
  for (const s of sandboxes.splice(0)) await s.close();
  dir.cleanup();
});

async function sandbox(options: SandboxOptions = {}): Promise<Sandbox> {
  const s = await startSandbox({ keys: [{ key: KEY }], ...options });
  sandboxes.push(s);
  return s;
}

/** A realistic input: companies under several spellings and aliases, misses and junk, shuffled. */
function input(sb: Sandbox, companies: number): string {
  const random = mulberry32(42);
  const rows: string[][] = [];
  for (const c of [...sb.directory].slice(100, 100 + companies)) {
    rows.push([c.name, c.domain]);
    if (random() < 0.3) rows.push([c.name, `https://www.${c.domain}/about`]);
    if (c.aliases.length > 0) rows.push([c.name, c.aliases[0] as string]);
  }
  for (let i = 0; i < 15; i++) rows.push(['Prospect', `not-held-${i}.com`]);
  for (const junk of ['', 'n/a', 'co.uk', '10.0.0.1']) rows.push(['Junk', junk]);
  for (let i = rows.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [rows[i], rows[j]] = [rows[j] as string[], rows[i] as string[]];
  }
  return dir.file('in.csv', csvText([['Company', 'Website'], ...rows]));
}

async function reference(inputPath: string): Promise<string> {
  const clean = await sandbox();
  const out = dir.file('reference.csv');
  const run = await runCli([inputPath, '-o', out, '--journal', dir.file('reference.journal')], { env: { ENRICH_BASE_URL: clean.url, ENRICH_API_KEY: KEY } });
  expect(run.code).toBe(0);
  return readFileSync(out, 'utf8');
}

function expectEachChargedOnce(sb: Sandbox, out: string): void {
  const matched = new Set(readCsvFile(out).filter((r) => r['enrich_status'] === 'matched').map((r) => r['company_domain']));
  const charges = sb.chargesByDomain(KEY);
  expect(new Set(charges.keys())).toStrictEqual(matched);
  for (const [domain, n] of charges) expect(n, domain).toBe(1);
}

async function until(condition: () => boolean, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('resume', () => {
  it('survives kill -9 at random moments: every company charged once, output identical to an uninterrupted run', async () => {
    const chaotic = await sandbox({ latencyMs: 10, failRate: 0.1, dropRate: 0.05, rateLimit: 400, burst: 20, seed: 9 });
    const inputPath = input(chaotic, 160);
    const expected = await reference(inputPath);
    const out = dir.file('out.csv');
    const env = { ENRICH_BASE_URL: chaotic.url, ENRICH_API_KEY: KEY };
    const random = mulberry32(2026);
    let kills = 0;
    let code = -1;
    for (let round = 0; round < 60 && code !== 0; round++) {
      const p = spawnCli([inputPath, '-o', out, '--concurrency', '8'], { env });
      let exited = false;
      void p.exited.then(() => (exited = true));
      // Progress, not a timer, picks the moment (a timer kills every run on a loaded machine):
      // at start-up, after the service has seen k more requests, or while results are written.
      const before = chaotic.stats.requests;
      const atStart = random() < 0.15;
      const k = 1 + Math.floor(random() * 60);
      const inWrite = random() < 0.5;
      const moment = (): boolean =>
        atStart || chaotic.stats.requests >= before + k || (inWrite && readdirSync(dir.path).some((f) => f.includes('enrich-tmp')));
      void (async () => {
        while (!exited && !moment()) await new Promise((r) => setTimeout(r, 2));
        if (exited) return;
        kills++;
        p.child.kill('SIGKILL');
      })();
      code = await p.exited;
      expect([0, 137], p.stderr()).toContain(code);
    }
    expect(code).toBe(0);
    expect(kills).toBeGreaterThanOrEqual(8);
    expect(readFileSync(out, 'utf8')).toBe(expected);
    expectEachChargedOnce(chaotic, out);
    // Nothing half-written was left behind by the killed runs.
    expect(readdirSync(dir.path).filter((f) => f.includes('enrich-tmp'))).toStrictEqual([]);
  }, 120_000);

  it('Ctrl-C lets requests already sent finish, saves the journal, exits 130, and the rerun completes', async () => {
    const slow = await sandbox({ latencyMs: 150 });
    const inputPath = input(slow, 40);
    const expected = await reference(inputPath);
    const out = dir.file('out.csv');
    const env = { ENRICH_BASE_URL: slow.url, ENRICH_API_KEY: KEY };
    const p = spawnCli([inputPath, '-o', out, '--concurrency', '4'], { env });
    await until(() => slow.stats.enrichCalls.size >= 3);
    p.child.kill('SIGINT');
    expect(await p.exited).toBe(130);
    expect(p.stderr()).toContain('requests already sent finish, then the journal is saved');
    expect(p.stderr()).toMatch(/enrich: interrupted\n[^]*\nenrich: the journal is saved in .*in\.csv\.enrich-journal; run the same command to resume/);
    // Every charge the service made is in the journal: no answer was abandoned.
    const journal = readFileSync(`${inputPath}.enrich-journal`, 'utf8');
    const hits = journal.split('\n').filter((l) => l.includes('"t":"enrich"') && l.includes('"s":"hit"')).length;
    expect(hits).toBe(slow.ledger(KEY).length);
    expect(() => statSync(out)).toThrow();

    const rerun = await runCli([inputPath, '-o', out], { env });
    expect(rerun.code).toBe(0);
    expect(rerun.stderr).toContain('resuming from');
    expect(readFileSync(out, 'utf8')).toBe(expected);
    expectEachChargedOnce(slow, out);
  }, 60_000);

  it('a second Ctrl-C quits at once, leaving a journal the next run resumes from', async () => {
    const slow = await sandbox({ latencyMs: 5_000 });
    const inputPath = input(slow, 10);
    const env = { ENRICH_BASE_URL: slow.url, ENRICH_API_KEY: KEY };
    const p = spawnCli([inputPath, '-o', dir.file('out.csv')], { env });
    await until(() => slow.stats.requests >= 2);
    const t0 = Date.now();
    p.child.kill('SIGINT');
    await p.waitFor('Ctrl-C again quits at once');
    p.child.kill('SIGINT');
    expect(await p.exited).toBe(130);
    expect(Date.now() - t0).toBeLessThan(3_000);
    expect(p.stderr()).toContain('quit at once; the journal is valid');
    // The lock went with it: the same command resumes at once.
    slow.setLatency(0);
    const out = dir.file('out.csv');
    const rerun = await runCli([inputPath, '-o', out], { env });
    expect(rerun.code).toBe(0);
    expectEachChargedOnce(slow, out);
  }, 30_000);

  it('refuses a second run on the same journal while the first is alive', async () => {
    const slow = await sandbox({ latencyMs: 300 });
    const inputPath = input(slow, 20);
    const env = { ENRICH_BASE_URL: slow.url, ENRICH_API_KEY: KEY };
    const first = spawnCli([inputPath, '-o', dir.file('a.csv')], { env });
    await until(() => slow.stats.requests >= 1);
    const second = await runCli([inputPath, '-o', dir.file('b.csv')], { env });
    expect(second.code).toBe(2);
    expect(second.stderr).toMatch(new RegExp(`in use by another enrich \\(pid ${first.child.pid} on `));
    first.child.kill('SIGKILL');
    await first.exited;
  }, 30_000);

  it('refuses a journal when the input changed since, and --fresh starts over keeping the old one', async () => {
    const sb = await sandbox();
    const inputPath = input(sb, 5);
    const env = { ENRICH_BASE_URL: sb.url, ENRICH_API_KEY: KEY };
    expect((await runCli([inputPath, '-o', dir.file('o.csv')], { env })).code).toBe(0);
    const charged = sb.ledger(KEY).length;
    appendFileSync(inputPath, 'Extra,extra-row.com\n');
    const refused = await runCli([inputPath, '-o', dir.file('o.csv')], { env });
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/belongs to a different input: .*run with --fresh to start over/);
    expect(sb.stats.requests).toBeGreaterThan(0);
    const fresh = await runCli([inputPath, '-o', dir.file('o.csv'), '--fresh'], { env });
    expect(fresh.code).toBe(0);
    expect(fresh.stderr).toMatch(/the previous journal was kept as .*\.replaced-/);
    // --fresh is a new unit of work: it buys again, as documented.
    expect(sb.ledger(KEY).length).toBe(charged * 2);
  });

  it('keeps the key out of the journal, the output and every message; both files owner-only', async () => {
    const sb = await sandbox({ keys: [{ key: KEY, balance: 2 }] });
    const inputPath = input(sb, 6);
    const out = dir.file('out.csv');
    const run = await runCli([inputPath, '-o', out], { env: { ENRICH_BASE_URL: sb.url, ENRICH_API_KEY: KEY } });
    expect(run.code).toBe(4);
    const journalPath = `${inputPath}.enrich-journal`;
    for (const text of [readFileSync(journalPath, 'utf8'), readFileSync(out, 'utf8'), run.stderr, run.stdout]) expect(text).not.toContain(KEY);
    expect(statSync(journalPath).mode & 0o777).toBe(0o600);
    expect(statSync(out).mode & 0o777).toBe(0o600);
  });

  it('counts credits per invocation and over all invocations of the journal', async () => {
    const sb = await sandbox({ keys: [{ key: KEY, balance: 4 }] });
    const inputPath = input(sb, 10);
    const env = { ENRICH_BASE_URL: sb.url, ENRICH_API_KEY: KEY };
    const first = JSON.parse((await runCli([inputPath, '-o', dir.file('o.csv'), '--summary-json', '-'], { env })).stdout) as Record<string, number>;
    expect(first).toMatchObject({ credits_charged: 4, credits_charged_total: 4, credits_remaining: 0 });
    sb.topUp(KEY, 100);
    const second = JSON.parse((await runCli([inputPath, '-o', dir.file('o.csv'), '--summary-json', '-'], { env })).stdout) as Record<string, number>;
    expect(second['credits_charged']).toBe(6);
    expect(second['credits_charged_total']).toBe(10);
    expect(second['estimated_credits']).toBe(0);
  });
});
