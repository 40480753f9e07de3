import { chmodSync, existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { parse } from 'csv-parse/sync';
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
function input(sb: Sandbox, companies: number, from = 100, name = 'in.csv'): string {
  const random = mulberry32(42);
  const rows: string[][] = [];
  for (const c of [...sb.directory].slice(from, from + companies)) {
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
  return dir.file(name, csvText([['Company', 'Website'], ...rows]));
}

async function reference(inputPath: string): Promise<string> {
  const clean = await sandbox();
  const out = dir.file('reference.csv');
  const run = await runCli([inputPath, '-o', out, '--store', dir.file('reference.db')], { env: { ENRICH_BASE_URL: clean.url, ENRICH_API_KEY: KEY } });
  expect(run.code).toBe(0);
  return withoutProvenance(readFileSync(out, 'utf8'));
}

/**
 * The output minus the two columns that say where a record came from and when it was bought:
 * after a kill, what the killed run bought reads "store", so only those differ from a clean run.
 */
function withoutProvenance(csv: string): string {
  const rows = parse(csv, { bom: true, relax_column_count: false }) as string[][];
  const header = rows[0] as string[];
  const drop = new Set([header.indexOf('enrich_source'), header.indexOf('enrich_bought_at')]);
  return rows.map((r) => r.filter((_, i) => !drop.has(i)).join('\u001f')).join('\n');
}

/** `exactly`: the sandbox charged nothing but this output's companies (false: other outputs share it). */
function expectEachChargedOnce(sb: Sandbox, out: string, exactly = true): void {
  const matched = new Set(readCsvFile(out).filter((r) => r['enrich_status'] === 'matched').map((r) => r['company_domain']));
  const charges = sb.chargesByDomain(KEY);
  if (exactly) expect(new Set(charges.keys())).toStrictEqual(matched);
  else for (const domain of matched) expect(charges.has(domain as string), domain).toBe(true);
  for (const [domain, n] of charges) expect(n, domain).toBe(1);
}

/** The rows a run ended in error, each with its enrich_error, for a failed exit code to name its cause. */
function errorRows(out: string): string {
  if (!existsSync(out)) return '\n(no output written)';
  const rows = readCsvFile(out).filter((r) => r['enrich_status'] === 'error');
  return rows.map((r) => `\nerror row: ${r['Website'] ?? ''} -> ${r['company_domain'] ?? ''}: ${r['enrich_error'] ?? ''}`).join('');
}

/** Waits for a condition on the run's progress (never a deadline: the test's own timeout bounds it). */
async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((r) => setTimeout(r, 5));
}

/**
 * Kills the run with SIGKILL once the sandbox has seen `after` more requests (0: as soon as it
 * starts), or lets it finish if it gets there first. Progress, not the clock, picks the moment, so
 * the kills land at the same points of the work on a fast machine and a slow, loaded one.
 */
async function killAfter(sb: Sandbox, p: ReturnType<typeof spawnCli>, after: number): Promise<number> {
  const target = sb.stats.requests + after;
  let exited = false;
  void p.exited.then(() => (exited = true));
  await until(() => exited || sb.stats.requests >= target);
  if (!exited) p.child.kill('SIGKILL');
  return p.exited;
}

describe('resume', () => {
  it('survives kill -9 at points picked by progress: one charge each, output as if unbroken', async () => {
    const chaotic = await sandbox({ latencyMs: 10, failRate: 0.1, dropRate: 0.05, rateLimit: 400, burst: 20, seed: 9 });
    const inputPath = input(chaotic, 160);
    const expected = await reference(inputPath);
    const out = dir.file('out.csv');
    const env = { ENRICH_BASE_URL: chaotic.url, ENRICH_API_KEY: KEY };
    const random = mulberry32(2026);
    let kills = 0;
    // Ten kills spread over the work (start-up, matching, enriching), then a run left to finish.
    for (let round = 0; round < 10; round++) {
      const p = spawnCli([inputPath, '-o', out, '--concurrency', '8'], { env });
      const code = await killAfter(chaotic, p, round === 0 ? 0 : Math.floor(random() * 60));
      expect([0, 137], p.stderr()).toContain(code);
      if (code === 137) kills++;
    }
    // The storm goes on. A company whose attempts all meet the injected faults ends as an error
    // row ('internal' for a 500, 'network_error' for a drop) and exit 3, by design: the same
    // command retries it. Once on one core in many runs of the suite, so up to two such reruns,
    // each under the same storm; then exit 0.
    let last = await runCli([inputPath, '-o', out], { env });
    for (let rerun = 0; rerun < 2 && last.code === 3; rerun++) {
      expect(errorRows(out), last.stderr).toMatch(/^(\nerror row: [^\n]*: (internal|network_error)\b[^\n]*)+$/);
      last = await runCli([inputPath, '-o', out], { env });
    }
    expect(last.code, `${last.stderr}${errorRows(out)}`).toBe(0);
    expect(kills).toBeGreaterThanOrEqual(5);
    expect(withoutProvenance(readFileSync(out, 'utf8'))).toBe(expected);
    expectEachChargedOnce(chaotic, out);
    // Nothing half-written was left behind by the killed runs.
    expect(readdirSync(dir.path).filter((f) => f.includes('enrich-tmp'))).toStrictEqual([]);
  });

  // Stripe-style: every outcome stored under its key, fresh request ids, 3% 500s.
  it('four rounds of five kill -9s on a Stripe-style service: each ends in exit 0, charged once', async () => {
    // The audit's storm: in 3 of 9 rounds the last run took the stored 500s its keys replayed for
    // an outage (exit 6, no results). Each round kills at points picked by progress.
    const stripe = await sandbox({ idempotency: 'stripe', replayRequestId: 'fresh', latencyMs: 30, failRate: 0.03, seed: 23 });
    const env = { ENRICH_BASE_URL: stripe.url, ENRICH_API_KEY: KEY };
    const random = mulberry32(13);
    for (let round = 0; round < 4; round++) {
      const inputPath = input(stripe, 40, 1_000 + round * 40, `storm-${round}.csv`);
      const out = dir.file(`storm-${round}.out.csv`);
      // The same command every time; --settle 2s stands for the default minute, to keep the test short.
      const args = [inputPath, '-o', out, '--concurrency', '8', '--settle', '2s', '--timeout', '2s'];
      for (let kill = 0; kill < 5; kill++) {
        const p = spawnCli(args, { env });
        expect([0, 137, 3], p.stderr()).toContain(await killAfter(stripe, p, 3 + Math.floor(random() * 20)));
      }
      const last = await runCli(args, { env });
      expect(last.code, `round ${round}: ${last.stderr}`).toBe(0);
      expectEachChargedOnce(stripe, out, false);
    }
  });

  it('five kill -9s on a Stripe-style service that drops answers: exit 0, each charged once', async () => {
    const stripe = await sandbox({ idempotency: 'stripe', replayRequestId: 'fresh', latencyMs: 5, failRate: 0.03, dropRate: 0.03, seed: 17 });
    const inputPath = input(stripe, 120);
    const out = dir.file('out.csv');
    const env = { ENRICH_BASE_URL: stripe.url, ENRICH_API_KEY: KEY };
    const random = mulberry32(5);
    for (let round = 0; round < 5; round++) {
      const p = spawnCli([inputPath, '-o', out, '--concurrency', '8'], { env });
      expect([0, 137, 3], p.stderr()).toContain(await killAfter(stripe, p, 5 + Math.floor(random() * 50)));
    }
    // The sandbox finishes a call before it answers or drops it, so a lost call has always
    // settled by the next attempt: a short --settle (with --timeout as short) says so. A stored error then retires its key.
    const last = await runCli([inputPath, '-o', out, '--settle', '2s', '--timeout', '2s'], { env });
    expect(last.code, last.stderr).toBe(0);
    expectEachChargedOnce(stripe, out);
  });

  it('Ctrl-C lets sent requests finish, keeps what they bought, exits 130; the rerun completes', async () => {
    const slow = await sandbox({ latencyMs: 150 });
    const inputPath = input(slow, 40);
    const expected = await reference(inputPath);
    const out = dir.file('out.csv');
    const env = { ENRICH_BASE_URL: slow.url, ENRICH_API_KEY: KEY };
    const p = spawnCli([inputPath, '-o', out, '--concurrency', '4'], { env });
    await until(() => slow.stats.enrichCalls.size >= 3);
    p.child.kill('SIGINT');
    expect(await p.exited).toBe(130);
    expect(p.stderr()).toContain('Ctrl-C: stopping; requests already sent finish and what they buy is kept');
    expect(p.stderr()).toMatch(/everything bought is kept in the store \(.*store\.db\); run the same command to finish/);
    // Every charge the service made is in the store: no answer was abandoned.
    const held = JSON.parse((await runCli(['ledger', '--json'])).stdout) as { services: { companies: number }[] };
    expect(held.services[0]?.companies).toBe(slow.ledger(KEY).length);
    expect(() => statSync(out)).toThrow();

    const rerun = await runCli([inputPath, '-o', out], { env });
    expect(rerun.code).toBe(0);
    expect(withoutProvenance(readFileSync(out, 'utf8'))).toBe(expected);
    expectEachChargedOnce(slow, out);
  });

  it('a second Ctrl-C quits at once, before answers in flight arrive; the next run finishes', async () => {
    const slow = await sandbox({ latencyMs: 60_000 });
    const inputPath = input(slow, 10);
    const env = { ENRICH_BASE_URL: slow.url, ENRICH_API_KEY: KEY };
    const p = spawnCli([inputPath, '-o', dir.file('out.csv')], { env });
    await until(() => slow.stats.requests >= 2);
    const t0 = Date.now();
    p.child.kill('SIGINT');
    await p.waitFor('Ctrl-C again quits at once');
    p.child.kill('SIGINT');
    expect(await p.exited).toBe(130);
    expect(p.stderr()).toContain('quit at once; the store is consistent');
    // It did not wait for the service, whose answers take a minute (a bound no machine nears).
    expect(Date.now() - t0).toBeLessThan(30_000);
    slow.setLatency(0);
    const out = dir.file('out.csv');
    const rerun = await runCli([inputPath, '-o', out], { env });
    expect(rerun.code).toBe(0);
    expectEachChargedOnce(slow, out);
  });

  it('counts credits per invocation: a resume after a top-up reports only its own', async () => {
    const sb = await sandbox({ keys: [{ key: KEY, balance: 4 }] });
    const inputPath = input(sb, 10);
    const env = { ENRICH_BASE_URL: sb.url, ENRICH_API_KEY: KEY };
    const first = JSON.parse((await runCli([inputPath, '-o', dir.file('o.csv'), '--summary-json', '-'], { env })).stdout) as Record<string, number>;
    expect(first).toMatchObject({ credits_charged: 4, bought: 4, credits_remaining: 0 });
    sb.topUp(KEY, 100);
    const second = JSON.parse((await runCli([inputPath, '-o', dir.file('o.csv'), '--summary-json', '-'], { env })).stdout) as Record<string, number>;
    expect(second).toMatchObject({ credits_charged: 6, bought: 6, reused: 4, estimated_credits: 0 });
  });

  // A replaced output keeps its mode.
  it('keeps the key out of every file and message; the store owner-only, outputs by the umask', async () => {
    const sb = await sandbox({ keys: [{ key: KEY, balance: 2 }] });
    const inputPath = input(sb, 6);
    const out = dir.file('out.csv');
    const store = dir.file('store.db');
    const run = await runCli([inputPath, '-o', out, '--store', store], { env: { ENRICH_BASE_URL: sb.url, ENRICH_API_KEY: KEY } });
    expect(run.code).toBe(4);
    for (const text of [readFileSync(store, 'latin1'), readFileSync(out, 'utf8'), run.stderr, run.stdout]) expect(text).not.toContain(KEY);
    expect(statSync(store).mode & 0o777).toBe(0o600);
    // Results a teammate or a BI tool reads from a shared folder: not forced private (issue 36).
    const umask = process.umask(0o027);
    try {
      const fresh = dir.file('fresh.csv');
      expect((await runCli([inputPath, '-o', fresh, '--store', store], { env: { ENRICH_BASE_URL: sb.url, ENRICH_API_KEY: KEY } })).code).toBe(4);
      expect(statSync(fresh).mode & 0o777).toBe(0o640);
      chmodSync(out, 0o664);
      expect((await runCli([inputPath, '-o', out, '--store', store], { env: { ENRICH_BASE_URL: sb.url, ENRICH_API_KEY: KEY } })).code).toBe(4);
      expect(statSync(out).mode & 0o777).toBe(0o664);
    } finally {
      process.umask(umask);
    }
  });
});
