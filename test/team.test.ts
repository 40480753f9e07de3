import { mkdirSync, readFileSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { parse } from 'csv-parse/sync';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mulberry32 } from '../src/sandbox/random.js';
import { startSandbox, type Sandbox, type SandboxOptions } from '../src/sandbox/index.js';
import { csvText, runCli, tempDir } from './helpers/cli.js';
import { hostileServer, json, type Hostile } from './helpers/hostile.js';
import { companyRecord } from './helpers/records.js';
import { createPostgres, NO_DURABILITY, type Postgres } from './helpers/postgres-server.js';
import { freshDatabase, sql } from './helpers/postgres.js';
import { client, Session } from '../src/store/postgres/connect.js';
import { spawnCli, type Spawned } from './helpers/spawn.js';

/**
 * The team store end to end (issue 21): machines played by processes of the built CLI with
 * different ENRICH_HOST, each with a home of its own, against one sandbox over HTTP (whose ledger
 * is the proof of what was charged) and a real PostgreSQL. Kills and restarts are triggered by
 * progress (requests the sandbox has seen), never by a timer.
 */
const KEY = 'sk_test_team_0123456789';
/** The clean single-machine reference runs charge this key, so they never count as the team's. */
const REF_KEY = 'sk_test_team_reference';

let dir: ReturnType<typeof tempDir>;
const sandboxes: Sandbox[] = [];
const running: Spawned[] = [];
const proxies: Hostile[] = [];
const privateServers: { remove(): Promise<void> }[] = [];

beforeEach(() => {
  dir = tempDir('enrich-team-');
});
afterEach(async () => {
  // A test that failed midway leaves no machine running into the next one.
  for (const p of running.splice(0)) if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL');
  for (const p of proxies.splice(0)) await p.close();
  for (const s of sandboxes.splice(0)) await s.close();
  for (const s of privateServers.splice(0)) await s.remove();
  dir.cleanup();
});

async function sandbox(options: SandboxOptions = {}): Promise<Sandbox> {
  const s = await startSandbox({ keys: [{ key: KEY }, { key: REF_KEY }], ...options });
  sandboxes.push(s);
  return s;
}

/**
 * Lost answers as a network loses them: a proxy in front of the service that forwards every
 * request, and resets the connection instead of passing on a share of the 200s (drawn from
 * `seed`), after the service ran the call (and charged an enrich). The service's own errors
 * always arrive: its stored ones are the sandbox's to play.
 */
async function lossyProxy(target: string, rate: number, seed: number): Promise<Hostile & { readonly lost: number }> {
  const random = mulberry32(seed);
  let lost = 0;
  const server = await hostileServer((req, res, _n, body) => {
    const upstream = request(new URL(req.url ?? '/', target), { method: req.method, headers: req.headers }, (answer) => {
      const chunks: Buffer[] = [];
      answer.on('data', (c: Buffer) => chunks.push(c));
      answer.on('end', () => {
        if (answer.statusCode === 200 && (req.url ?? '').includes('/company/') && random() < rate) {
          lost++;
          res.socket?.destroy();
          return;
        }
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        res.end(Buffer.concat(chunks));
      });
    });
    upstream.on('error', () => res.socket?.destroy());
    upstream.end(body);
  });
  proxies.push(server);
  return {
    url: server.url,
    get requests() {
      return server.requests;
    },
    get lost() {
      return lost;
    },
    close: () => server.close(),
  };
}

interface Machine {
  name: string;
  env: Record<string, string>;
  /** Runs the batch as this machine, in a process of its own, on the store it was given. */
  run(args: string[]): Spawned;
  /** Runs any other command as this machine, as given. */
  exec(args: string[]): Spawned;
}

/**
 * A machine of the team: its host name in the store, and a home, state and cache of its own (the
 * scan caches stay on each machine). `via`: how it names the team store (the flag or the env).
 */
function machine(name: string, host: string, service: { url: string }, store: string, via: 'flag' | 'env'): Machine {
  const home = join(dir.path, name);
  mkdirSync(home);
  const env: Record<string, string> = {
    HOME: home,
    XDG_STATE_HOME: join(home, 'state'),
    XDG_CACHE_HOME: join(home, 'cache'),
    ENRICH_HOST: host,
    ENRICH_BASE_URL: service.url,
    ENRICH_API_KEY: KEY,
    ...(via === 'env' ? { ENRICH_STORE: store } : {}),
  };
  const exec = (args: string[]): Spawned => {
    const p = spawnCli(args, { env });
    running.push(p);
    return p;
  };
  return { name, env, run: (args) => exec([...args, ...(via === 'flag' ? ['--store', store] : [])]), exec };
}

/**
 * Inputs over companies of the sandbox's directory: some under a second spelling (a repeat row),
 * plus misses and junk, shuffled by `seed`.
 */
function inputRows(sb: Sandbox, companies: readonly string[], seed: number, misses: readonly string[]): string[][] {
  const random = mulberry32(seed);
  const byDomain = new Map([...sb.directory].map((c) => [c.domain, c]));
  const rows: string[][] = [];
  for (const domain of companies) {
    const c = byDomain.get(domain);
    if (c === undefined) throw new Error(`not in the directory: ${domain}`);
    rows.push([c.name, c.domain]);
    if (random() < 0.2) rows.push([c.name, `https://www.${c.domain}/about`]);
    if (c.aliases.length > 0 && random() < 0.3) rows.push([c.name, c.aliases[0] as string]);
  }
  for (const m of misses) rows.push(['Prospect', m]);
  for (const junk of ['', 'n/a', 'co.uk']) rows.push(['Junk', junk]);
  for (let i = rows.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [rows[i], rows[j]] = [rows[j] as string[], rows[i] as string[]];
  }
  return rows;
}

function writeInput(name: string, rows: readonly string[][]): string {
  return dir.file(name, csvText([['Company', 'Website'], ...rows]));
}

/**
 * Two overlapping inputs: `shared` companies in both, `own` in each alone, a few misses shared
 * too; and their union, and the companies it names.
 */
function overlapping(sb: Sandbox, from: number, shared: number, own: number): { a: string; b: string; union: string; companies: string[] } {
  const all = [...sb.directory].slice(from, from + shared + 2 * own).map((c) => c.domain);
  const common = all.slice(0, shared);
  const onlyA = all.slice(shared, shared + own);
  const onlyB = all.slice(shared + own);
  const misses = Array.from({ length: 8 }, (_, i) => `not-held-${from}-${i}.com`);
  const rowsA = inputRows(sb, [...common, ...onlyA], from + 1, misses);
  const rowsB = inputRows(sb, [...onlyB, ...common], from + 2, misses.slice(4));
  return {
    a: writeInput('a.csv', rowsA),
    b: writeInput('b.csv', rowsB),
    union: writeInput('union.csv', [...rowsB, ...rowsA]),
    companies: all,
  };
}

type Row = Record<string, string>;

function readRows(path: string): Row[] {
  return parse(readFileSync(path), { bom: true, columns: true }) as Row[];
}

/** Where a record came from, as a clean run and a team run must agree on it: a company's first row, or a repeat. */
const place = (source: string): string => (source === 'bought' || source === 'store' ? 'first' : source);

/**
 * A team run's output against a clean single-machine run's: every input row, in input order,
 * every column identical (the input's, the status, the error, the company and its record), but
 * where the record came from (bought by this run or reused from the store: which machine bought
 * it is the race's to decide) and when it was bought. A company's first row and its repeats
 * stand where they stand in the clean run.
 */
function expectSameAsClean(out: string, clean: string, who: string): void {
  const got = readRows(out);
  const want = readRows(clean);
  expect(got.length, who).toBe(want.length);
  const strip = (r: Row): Row => {
    const { enrich_source: source = '', enrich_bought_at: _at, ...rest } = r;
    return { ...rest, enrich_source: place(source) };
  };
  expect(got.map(strip), who).toStrictEqual(want.map(strip));
}

/** A clean run of one machine alone, on a store of its own, charging the reference key. */
async function cleanRun(sb: Sandbox, input: string, name: string): Promise<string> {
  const out = dir.file(`${name}.clean.csv`);
  const run = await runCli([input, '-o', out, '--store', dir.file(`${name}.clean.db`), '--quiet'], { env: { ENRICH_BASE_URL: sb.url, ENRICH_API_KEY: REF_KEY } });
  expect(run.code, run.stderr).toBe(0);
  return out;
}

/** Every company the team's outputs show matched was charged exactly once at the service, under one key, and nothing else was. */
function expectChargedOnce(sb: Sandbox, outputs: readonly string[]): Set<string> {
  const matched = new Set<string>();
  for (const out of outputs) for (const r of readRows(out)) if (r['enrich_status'] === 'matched') matched.add(r['company_domain'] as string);
  const ledger = sb.ledger(KEY);
  const charges = sb.chargesByDomain(KEY);
  expect([...charges].filter(([, n]) => n > 1), 'charged more than once').toStrictEqual([]);
  expect(new Set(charges.keys())).toStrictEqual(matched);
  // One charge per company, each under a key of its own (a key charged twice would be a service bug).
  expect(new Set(ledger.map((e) => e.idempotencyKey)).size).toBe(ledger.length);
  expect(ledger.every((e) => e.idempotencyKey !== null)).toBe(true);
  return matched;
}

function summaryOf(path: string): Record<string, unknown> {
  return JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>;
}

/** The team's outputs agree with each other: one record per company, bought once, shown with the same purchase time everywhere. */
function expectOneRecordEach(outputs: readonly string[]): void {
  const at = new Map<string, string>();
  for (const out of outputs) {
    for (const r of readRows(out)) {
      if (r['enrich_status'] !== 'matched') continue;
      const domain = r['company_domain'] as string;
      const seen = at.get(domain);
      if (seen === undefined) at.set(domain, r['enrich_bought_at'] as string);
      else expect(r['enrich_bought_at'], `${domain} in ${out}`).toBe(seen);
    }
  }
}

/** Waits for a condition on the work's progress (never a deadline: the test's own timeout bounds it). */
async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((r) => setTimeout(r, 5));
}

/** kill -9 once `condition` holds of the work's progress, unless the run ends first; its exit code (137 for the kill). */
async function killWhen(p: Spawned, condition: () => boolean): Promise<number> {
  let exited = false;
  void p.exited.then(() => (exited = true));
  await until(() => exited || condition());
  if (!exited) p.child.kill('SIGKILL');
  return p.exited;
}

/**
 * kill -9 once the sandbox has seen `after` more requests (from either machine): progress, not
 * the clock, picks the moment, so a loaded machine is killed at the same points of the work as a
 * fast one.
 */
async function killAfter(sb: Sandbox, p: Spawned, after: number): Promise<number> {
  const target = sb.stats.requests + after;
  return killWhen(p, () => sb.stats.requests >= target);
}

/** No purchase is left open, and the store holds every company the outputs show. */
async function expectStoreSettled(store: string, matched: ReadonlySet<string>): Promise<void> {
  expect(await sql(store, "SELECT domain, outcome, intent_key, owner_run FROM purchases WHERE outcome = 'open'")).toStrictEqual([]);
  const held = await sql<{ domain: string }>(store, 'SELECT domain FROM companies');
  expect(new Set(held.map((r) => r.domain))).toStrictEqual(matched);
}

/** Paid calls the sandbox has seen, every key and company. */
const paidCalls = (sb: Sandbox): number => [...sb.stats.enrichCalls.values()].reduce((sum, n) => sum + n, 0);

/** A PostgreSQL of this test's own, to restart under a run (the suite's is shared by every test file). */
async function privatePostgres(): Promise<Postgres> {
  const handle = await createPostgres([...NO_DURABILITY, 'max_connections=50']);
  await handle.start();
  privateServers.push(handle);
  return handle;
}

/**
 * A Stripe-style service (every executed outcome stored under its key, a 500 included) of the
 * companies `held`, whose first paid call for `unlucky` failed with a 500 and lost its answer
 * (the connection reset): that key replays the 500 for ever. Counts its charges per company.
 */
async function storedLost500(held: readonly string[], unlucky: string): Promise<Hostile & { charges: Map<string, number> }> {
  const charges = new Map<string, number>();
  const stored = new Map<string, { status: number; body: unknown }>();
  const problem = { type: 'https://service.example/problems/internal', title: 'Internal', status: 500, code: 'internal' };
  let first = true;
  const server = await hostileServer((req, res, _n, body) => {
    const url = new URL(req.url ?? '/', 'http://x');
    if (url.pathname.endsWith('/company/match')) {
      const domain = url.searchParams.get('domain') ?? '';
      json(res, 200, held.includes(domain) ? { matched: true, credits_charged: 0, company: { domain, name: domain } } : { matched: false, credits_charged: 0, company: null });
      return;
    }
    const domain = (JSON.parse(body) as { domain?: string }).domain;
    // No domain (enrich's probe of the paid endpoint): 422, as the spec answers it, never billed.
    if (domain === undefined) return json(res, 422, { ...problem, type: 'https://service.example/problems/validation_error', status: 422, code: 'validation_error' });
    const key = String(req.headers['idempotency-key']);
    const replay = stored.get(key);
    if (replay !== undefined) {
      json(res, replay.status, replay.body, { 'idempotent-replayed': 'true' });
      return;
    }
    if (domain === unlucky && first) {
      first = false;
      stored.set(key, { status: 500, body: problem });
      res.socket?.destroy();
      return;
    }
    charges.set(domain, (charges.get(domain) ?? 0) + 1);
    const answer = { matched: true, credits_charged: 1, credits_remaining: 100, company: companyRecord(domain) };
    stored.set(key, { status: 200, body: answer });
    json(res, 200, answer);
  });
  proxies.push(server);
  return Object.assign(server, { charges });
}

describe('the team store, end to end', () => {
  // Each output is complete, as a clean run's would be.
  it('two machines at once on overlapping inputs buy each company once; a third buys nothing', async () => {
    const sb = await sandbox({ latencyMs: 2 });
    const store = await freshDatabase();
    const { a, b, union } = overlapping(sb, 0, 150, 150);
    const laptop = machine('laptop', 'laptop-a', sb, store, 'flag');
    const cron = machine('cron', 'cron-b', sb, store, 'env');
    const outA = dir.file('a.out.csv');
    const outB = dir.file('b.out.csv');
    const runA = laptop.run([a, '-o', outA, '--quiet', '--concurrency', '8', '--summary-json', dir.file('a.summary.json')]);
    const runB = cron.run([b, '-o', outB, '--quiet', '--concurrency', '8', '--summary-json', dir.file('b.summary.json')]);
    expect(await runA.exited, runA.stderr()).toBe(0);
    expect(await runB.exited, runB.stderr()).toBe(0);

    const matched = expectChargedOnce(sb, [outA, outB]);
    expect(matched.size).toBe(450);
    await expectStoreSettled(store, matched);
    const summaryA = summaryOf(dir.file('a.summary.json'));
    const summaryB = summaryOf(dir.file('b.summary.json'));
    // Nothing was lost, so what each machine counted is what the service charged, between them.
    expect(Number(summaryA['credits_charged']) + Number(summaryB['credits_charged'])).toBe(sb.ledger(KEY).length);
    // Between them they bought every company once and reused each shared one once (from the
    // store, or after waiting on the other machine's purchase).
    expect(Number(summaryA['bought']) + Number(summaryB['bought'])).toBe(450);
    expect(Number(summaryA['reused']) + Number(summaryB['reused'])).toBe(150);
    // Each company says `bought` on one machine's first row, and `store` on the other's.
    const boughtRows = [outA, outB].flatMap((o) => readRows(o)).filter((r) => r['enrich_source'] === 'bought');
    expect(boughtRows.length).toBe(450);
    expect(new Set(boughtRows.map((r) => r['company_domain'])).size).toBe(450);
    expectOneRecordEach([outA, outB]);

    expectSameAsClean(outA, await cleanRun(sb, a, 'a'), 'laptop-a');
    expectSameAsClean(outB, await cleanRun(sb, b, 'b'), 'cron-b');

    // A third machine over the union buys nothing: no paid call at all, 0 credits.
    const paidBefore = paidCalls(sb);
    const ledgerBefore = sb.ledger(KEY).length;
    const third = machine('third', 'third', sb, store, 'flag');
    const outU = dir.file('union.out.csv');
    const runU = third.run([union, '-o', outU, '--quiet', '--summary-json', dir.file('u.summary.json')]);
    expect(await runU.exited, runU.stderr()).toBe(0);
    expect(summaryOf(dir.file('u.summary.json'))).toMatchObject({ credits_charged: 0, bought: 0, reused: 450 });
    expect(sb.ledger(KEY).length).toBe(ledgerBefore);
    expect(paidCalls(sb) - paidBefore).toBe(0);
    expect(readRows(outU).some((r) => r['enrich_source'] === 'bought')).toBe(false);
    expectSameAsClean(outU, await cleanRun(sb, union, 'union'), 'third');
    expectOneRecordEach([outA, outB, outU]);
  });
  // Faults: 500s, lost answers and stored errors; the outputs end as clean runs' would.
  it('kill -9 on both machines, three rounds, amid faults; reruns charge each company once', async () => {
    // Stripe-style: every executed outcome is stored under its key, a 500 included, so a key
    // that got one must move on; 5% of the answers are lost after the call ran (and charged).
    const sb = await sandbox({ idempotency: 'stripe', replayRequestId: 'fresh', latencyMs: 3, failRate: 0.05, seed: 21 });
    const service = await lossyProxy(sb.url, 0.05, 22);
    const clean = await sandbox();
    const store = await freshDatabase();
    const { a, b } = overlapping(sb, 2_000, 100, 100);
    const laptop = machine('laptop', 'laptop-a', service, store, 'flag');
    const cron = machine('cron', 'cron-b', service, store, 'env');
    const outA = dir.file('a.out.csv');
    const outB = dir.file('b.out.csv');
    // --settle 2s stands for the default minute (how long a lost call may still run at the service).
    const argsA = (settle: string): string[] => [a, '-o', outA, '--quiet', '--concurrency', '8', '--settle', settle, '--timeout', settle];
    const argsB = (settle: string): string[] => [b, '-o', outB, '--quiet', '--concurrency', '8', '--settle', settle, '--timeout', settle];
    // What a run cut short may end with besides the kill: rows failed (3), or the breaker opened
    // on a run of stored 500s replayed under keys whose answers were lost (6).
    const cutShort = [0, 3, 6, 137];
    const random = mulberry32(77);
    let kills = 0;
    for (let round = 0; round < 3; round++) {
      const pA = laptop.run(argsA('2s'));
      const pB = cron.run(argsB('2s'));
      // Round 0 kills laptop-a before it has sent much; the others further into the work.
      const codes = await Promise.all([killAfter(sb, pA, round === 0 ? 2 : 20 + Math.floor(random() * 100)), killAfter(sb, pB, 20 + Math.floor(random() * 120))]);
      for (const [i, code] of codes.entries()) expect(cutShort, `round ${round} ${i === 0 ? 'laptop-a' : 'cron-b'}: ${[pA, pB][i]?.stderr()}`).toContain(code);
      kills += codes.filter((c) => c === 137).length;
    }
    expect(kills).toBeGreaterThanOrEqual(5);
    // Then the same commands, both machines at once, until both are done. The service finishes a
    // call before its answer is lost, so a lost call has settled by the next attempt: 2s, as short as --timeout, with room for a loaded machine.
    let done = false;
    for (let rerun = 0; rerun < 3 && !done; rerun++) {
      const pA = laptop.run(argsA('2s'));
      const pB = cron.run(argsB('2s'));
      const codes = await Promise.all([pA.exited, pB.exited]);
      for (const [i, code] of codes.entries()) expect(cutShort.slice(0, 3), [pA, pB][i]?.stderr()).toContain(code);
      done = codes.every((c) => c === 0);
    }
    expect(done).toBe(true);
    expect(sb.stats.byStatus[500] ?? 0).toBeGreaterThan(0);
    expect(service.lost).toBeGreaterThan(0);
    expect(sb.stats.replays).toBeGreaterThan(0);

    const matched = expectChargedOnce(sb, [outA, outB]);
    expect(matched.size).toBe(300);
    await expectStoreSettled(store, matched);
    expectSameAsClean(outA, await cleanRun(clean, a, 'a'), 'laptop-a');
    expectSameAsClean(outB, await cleanRun(clean, b, 'b'), 'cron-b');
    expectOneRecordEach([outA, outB]);
  });
  it('PostgreSQL restarted under a live run: nothing lost or charged twice; the run finishes', async () => {
    const pg = await privatePostgres();
    const sb = await sandbox({ latencyMs: 20 });
    const { a } = overlapping(sb, 4_000, 100, 100);
    const laptop = machine('laptop', 'laptop-a', sb, pg.url, 'flag');
    const out = dir.file('a.out.csv');
    const args = [a, '-o', out, '--quiet', '--concurrency', '8'];
    const p = laptop.run(args);
    let exited = false;
    void p.exited.then(() => (exited = true));
    // Well into the purchases: the restart lands while paid calls are in flight.
    await until(() => exited || paidCalls(sb) >= 60);
    expect(exited, p.stderr()).toBe(false);
    await pg.stop();
    const down = paidCalls(sb);
    // While the store is down no new purchase can start: once the run has seen it gone, only calls
    // whose intents were written before, at most one per slot of --concurrency. (Measured before
    // the server is back: the run reconnects as soon as it is, and buys on.)
    await until(() => exited || p.stderr().includes('lost the team store'));
    expect(paidCalls(sb) - down).toBeLessThanOrEqual(8);
    await pg.start();
    const code = await p.exited;
    // Either the run rode the restart out, or it stopped as unable to reach the store (6) and
    // the same command then finishes.
    expect([0, 6], p.stderr()).toContain(code);
    if (code === 6) {
      const rerun = laptop.run(args);
      expect(await rerun.exited, rerun.stderr()).toBe(0);
    }
    const matched = expectChargedOnce(sb, [out]);
    expect(matched.size).toBe(200);
    await expectStoreSettled(pg.url, matched);
    expectSameAsClean(out, await cleanRun(sb, a, 'a'), 'laptop-a');
  });
  // Under the same keys (the service replays, nothing is charged twice); the lease runs on the server's clock.
  it('a laptop killed mid-purchase: cron-b takes its purchases over once its lease lapses', async () => {
    // Answers take 100 ms, charged on arrival: a kill lands with paid calls charged and unanswered.
    const sb = await sandbox({ latencyMs: 100 });
    const store = await freshDatabase();
    const { a, union, companies } = overlapping(sb, 5_000, 60, 60);
    const laptop = machine('laptop', 'laptop-a', sb, store, 'flag');
    const cron = machine('cron', 'cron-b', sb, store, 'env');
    const pA = laptop.run([a, '-o', dir.file('a.out.csv'), '--quiet', '--concurrency', '8']);
    expect(await killWhen(pA, () => sb.ledger(KEY).length >= 30), pA.stderr()).toBe(137);
    // What the laptop left: purchases open under its intents, some charged at the service.
    const left = (await sql<{ domain: string; intent_key: string }>(store, "SELECT p.domain, p.intent_key FROM purchases p JOIN runs r ON r.id = p.owner_run WHERE p.outcome = 'open' AND r.host = 'laptop-a'")).map((r) => r.domain);
    const chargedUnanswered = left.filter((d) => sb.chargesByDomain(KEY).has(d));
    expect(chargedUnanswered.length).toBeGreaterThan(0);
    sb.setLatency(2);

    const out = dir.file('union.out.csv');
    const pB = cron.run([union, '-o', out, '--quiet', '--concurrency', '8']);
    // cron-b buys everything else, then can only wait: the laptop's lease (45 s, by the server's
    // clock) still holds, and a process of another host is never judged by its pid.
    const others = companies.filter((d) => !left.includes(d));
    await until(() => others.every((d) => sb.chargesByDomain(KEY).has(d)));
    const owners = await sql<{ host: string }>(store, 'SELECT r.host FROM purchases p JOIN runs r ON r.id = p.owner_run WHERE p.domain = any($1)', [left]);
    expect(owners.map((o) => o.host)).toStrictEqual(left.map(() => 'laptop-a'));
    const replaysBefore = sb.stats.replays;
    // The laptop's last heartbeat, as the server's clock sees it 46 s on.
    await sql(store, "UPDATE runs SET heartbeat_at = heartbeat_at - 46000 WHERE host = 'laptop-a'");
    expect(await pB.exited, pB.stderr()).toBe(0);
    // Taken over under the laptop's keys: what it was charged for is replayed, not charged again.
    expect(sb.stats.replays - replaysBefore).toBeGreaterThanOrEqual(chargedUnanswered.length);
    const matched = expectChargedOnce(sb, [out]);
    expect(matched.size).toBe(180);
    await expectStoreSettled(store, matched);
    expectSameAsClean(out, await cleanRun(sb, union, 'union'), 'cron-b');
  });
  // A key whose stored 500 was never seen, and nothing else to buy: the rerun asks the paid
  // endpoint with a request it cannot bill (the settle rule's evidence), then retires the key.
  it('a key whose stored 500 was never seen is retired by a rerun, and the company bought once', async () => {
    const service = await storedLost500(['stuck-co.com', 'fine-co.com'], 'stuck-co.com');
    const store = await freshDatabase();
    const laptop = machine('laptop', 'laptop-a', service, store, 'flag');
    const input = writeInput('in.csv', [['Stuck', 'stuck-co.com']]);
    const args = [input, '-o', dir.file('out.csv'), '--quiet', '--settle', '2s', '--timeout', '2s'];
    const first = laptop.run(args);
    expect([0, 3], first.stderr()).toContain(await first.exited);
    const rerun = laptop.run(args);
    expect(await rerun.exited, rerun.stderr()).toBe(0);
    expect([...service.charges]).toStrictEqual([['stuck-co.com', 1]]);
    expect(readRows(dir.file('out.csv')).map((r) => r['enrich_status'])).toStrictEqual(['matched']);
  });
  // Reads of one run go one at a time on its Session (pg warns of concurrent client.query()).
  it('a quiet run on a team store that already holds purchases writes nothing to stderr', async () => {
    const sb = await sandbox();
    const store = await freshDatabase();
    const { a, b } = overlapping(sb, 5_500, 20, 40);
    const laptop = machine('laptop', 'laptop-a', sb, store, 'flag');
    const first = laptop.run([a, '-o', dir.file('a.out.csv'), '--quiet']);
    expect(await first.exited).toBe(0);
    expect(first.stderr()).toBe('');
    const second = laptop.run([b, '-o', dir.file('b.out.csv'), '--quiet']);
    expect(await second.exited).toBe(0);
    expect(second.stderr()).toBe('');
  });
  // cron-b buys nothing the laptop bought and finishes its open purchases; a third machine buys nothing.
  it("a killed laptop's SQLite store copied in: nothing bought twice, its open keys replayed", async () => {
    // Answers take 100 ms, charged on arrival: the kill leaves paid calls charged and unanswered.
    const sb = await sandbox({ latencyMs: 100 });
    const store = await freshDatabase();
    const { a, companies } = overlapping(sb, 5_300, 60, 60);
    const own = companies.slice(0, 120);
    const laptopDb = dir.file('laptop.db');
    const laptop = machine('laptop', 'laptop-a', sb, laptopDb, 'flag');
    const pA = laptop.run([a, '-o', dir.file('a.laptop.csv'), '--quiet', '--concurrency', '8']);
    expect(await killWhen(pA, () => sb.ledger(KEY).length >= 40), pA.stderr()).toBe(137);
    const chargedByLaptop = new Set(sb.ledger(KEY).map((e) => e.domain));
    sb.setLatency(2);

    const copy = laptop.exec(['ledger', 'copy', laptopDb, store]);
    expect(await copy.exited, copy.stderr()).toBe(0);
    const copied = await sql<{ domain: string; outcome: string; intent_key: string | null }>(store, 'SELECT domain, outcome, intent_key FROM purchases');
    const closed = copied.filter((p) => p.outcome === 'hit').map((p) => p.domain);
    const open = copied.filter((p) => p.outcome === 'open' && p.intent_key !== null).map((p) => p.domain);
    expect(closed.length).toBeGreaterThan(0);
    // Some of the laptop's purchases were charged with their answers lost: open, under its keys.
    expect(open.filter((d) => chargedByLaptop.has(d)).length).toBeGreaterThan(0);

    const callsBefore = new Map(sb.stats.enrichCalls);
    const replaysBefore = sb.stats.replays;
    const cron = machine('cron', 'cron-b', sb, store, 'env');
    const out = dir.file('a.cron.csv');
    const pB = cron.run([a, '-o', out, '--quiet', '--summary-json', dir.file('b.summary.json')]);
    expect(await pB.exited, pB.stderr()).toBe(0);
    // Nothing the laptop bought was asked for again; what it left open was finished under its keys.
    for (const d of closed) expect(sb.stats.enrichCalls.get(d), d).toBe(callsBefore.get(d));
    expect(sb.stats.replays - replaysBefore).toBeGreaterThanOrEqual(open.filter((d) => chargedByLaptop.has(d)).length);
    expect(summaryOf(dir.file('b.summary.json'))).toMatchObject({ reused: closed.length, bought: own.length - closed.length });
    const matched = expectChargedOnce(sb, [out]);
    expect([...matched].sort()).toStrictEqual([...own].sort());
    await expectStoreSettled(store, matched);
    expectSameAsClean(out, await cleanRun(sb, a, 'a'), 'cron-b');

    // And a third machine on the same input buys nothing at all.
    const paidBefore = paidCalls(sb);
    const third = machine('third', 'third', sb, store, 'flag');
    const pC = third.run([a, '-o', dir.file('a.third.csv'), '--quiet', '--summary-json', dir.file('c.summary.json')]);
    expect(await pC.exited, pC.stderr()).toBe(0);
    expect(summaryOf(dir.file('c.summary.json'))).toMatchObject({ credits_charged: 0, bought: 0, reused: own.length });
    expect(paidCalls(sb)).toBe(paidBefore);
  });
  it('a lost Session reconnects once for many queries, and leaves nothing open when ended', async () => {
    const url = await freshDatabase();
    const database = new URL(url).pathname.slice(1);
    const first = client(url);
    await first.connect();
    const session = new Session(url, first);
    await session.query('SELECT 1');
    // The server ends the connection, as a restart does (57P01).
    await sql(url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND application_name = 'enrich'", [database]);
    const answers = await Promise.all(Array.from({ length: 8 }, (_, i) => session.query<{ n: number }>('SELECT $1::int AS n', [i])));
    expect(answers.map((a) => a.rows[0]?.n)).toStrictEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    const open = async (): Promise<number> => Number((await sql<{ n: string }>(url, "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = $1 AND application_name = 'enrich'", [database]))[0]?.n);
    expect(await open()).toBe(1);
    await session.end();
    // The server sees a client go a moment after it ends.
    let left = await open();
    for (let tries = 0; left > 0 && tries < 100; tries++) {
      await new Promise((r) => setTimeout(r, 20));
      left = await open();
    }
    expect(left).toBe(0);
  });
  it('PostgreSQL restarted under two live runs: nothing lost or charged twice; both finish', async () => {
    const pg = await privatePostgres();
    const sb = await sandbox({ latencyMs: 20 });
    const { a, b } = overlapping(sb, 4_000, 100, 100);
    const laptop = machine('laptop', 'laptop-a', sb, pg.url, 'flag');
    const cron = machine('cron', 'cron-b', sb, pg.url, 'env');
    const outA = dir.file('a.out.csv');
    const outB = dir.file('b.out.csv');
    const argsA = [a, '-o', outA, '--quiet', '--concurrency', '8'];
    const argsB = [b, '-o', outB, '--quiet', '--concurrency', '8'];
    const pA = laptop.run(argsA);
    // cron-b starts once the laptop is buying, so it finds the store holding something.
    await until(() => pA.child.exitCode !== null || paidCalls(sb) >= 20);
    const runs: [Machine, string[], Spawned][] = [
      [laptop, argsA, pA],
      [cron, argsB, cron.run(argsB)],
    ];
    let ended = 0;
    for (const [, , p] of runs) void p.exited.then(() => ended++);
    // Well into the purchases of both: the restart lands while paid calls are in flight, and
    // while one machine may be waiting on the other's purchase (its notification is lost).
    await until(() => ended > 0 || paidCalls(sb) >= 120);
    expect(ended, runs.map(([, , p]) => p.stderr()).join('\n')).toBe(0);
    await pg.stop();
    const down = paidCalls(sb);
    // While the store is down no new purchase can start: once each run has seen it gone, only
    // calls whose intents were written before, at most one per slot of --concurrency on each
    // machine. (Measured before the server is back: the runs reconnect as soon as it is.)
    await until(() => runs.every(([, , p]) => p.child.exitCode !== null || p.stderr().includes('lost the team store')));
    expect(paidCalls(sb) - down).toBeLessThanOrEqual(16);
    await pg.start();
    for (const [m, args, p] of runs) {
      const code = await p.exited;
      // Either the run rode the restart out, or it stopped as unable to reach the store (6),
      // and the same command then finishes.
      expect([0, 6], `${m.name}: ${p.stderr()}`).toContain(code);
      if (code === 6) {
        const rerun = m.run(args);
        expect(await rerun.exited, rerun.stderr()).toBe(0);
      }
    }
    const matched = expectChargedOnce(sb, [outA, outB]);
    expect(matched.size).toBe(300);
    await expectStoreSettled(pg.url, matched);
    expectSameAsClean(outA, await cleanRun(sb, a, 'a'), 'laptop-a');
    expectSameAsClean(outB, await cleanRun(sb, b, 'b'), 'cron-b');
    expectOneRecordEach([outA, outB]);
  });
  it('the balance runs out under both machines: exit 4, nothing charged twice; reruns finish', async () => {
    const sb = await startSandbox({ keys: [{ key: KEY, balance: 150 }, { key: REF_KEY }], latencyMs: 5 });
    sandboxes.push(sb);
    const store = await freshDatabase();
    const { a, b } = overlapping(sb, 5_600, 50, 100);
    const laptop = machine('laptop', 'laptop-a', sb, store, 'flag');
    const cron = machine('cron', 'cron-b', sb, store, 'env');
    const outA = dir.file('a.out.csv');
    const outB = dir.file('b.out.csv');
    const argsA = [a, '-o', outA, '--quiet', '--concurrency', '8'];
    const argsB = [b, '-o', outB, '--quiet', '--concurrency', '8'];
    const first = [laptop.run(argsA), cron.run(argsB)];
    const codes = await Promise.all(first.map((p) => p.exited));
    // 250 companies on 150 credits: at least one machine stops for credits (the other may have
    // bought all it needed first, on a loaded machine).
    for (const [i, code] of codes.entries()) expect([0, 4], first[i]?.stderr()).toContain(code);
    expect(codes).toContain(4);
    expect(sb.ledger(KEY).length).toBe(150);
    expect([...sb.chargesByDomain(KEY)].filter(([, n]) => n > 1)).toStrictEqual([]);
    sb.topUp(KEY, 1_000);
    const again = [laptop.run(argsA), cron.run(argsB)];
    const after = await Promise.all(again.map((p) => p.exited));
    expect(after, again.map((p) => p.stderr()).join('\n')).toStrictEqual([0, 0]);
    const matched = expectChargedOnce(sb, [outA, outB]);
    expect(matched.size).toBe(250);
    await expectStoreSettled(store, matched);
    expectSameAsClean(outA, await cleanRun(sb, a, 'a'), 'laptop-a');
    expectSameAsClean(outB, await cleanRun(sb, b, 'b'), 'cron-b');
  });
});
