/**
 * npm run bench: the performance figures of issue 5, each beside a baseline measured in the
 * same run (the machine is shared and noisy, so ratios are what to quote).
 *
 *   1. rate-limited: the sandbox at 100 req/s; achieved rate over the ceiling, share of 429s,
 *      and the same for the plain fetch baseline.
 *   2. unlimited: rows/s end to end for 20,000 unique domains, CLI (store on) vs baseline, and
 *      enrich 0.1 in the same rounds (the figure to hold); each one's peak RSS in those rounds.
 *   3. scale: wall and peak RSS at 100,000 and 1,000,000 rows, beside enrich 0.1 on the same input.
 *   4. the store: the 1,000,000-row input again with everything held (0.1: resuming its journal),
 *      and the store's size per company.
 *   5. sandbox: match/enrich req/s and server CPU per request, vs a bare node:http server.
 *   6. buckets: 100 req/s with buckets of 1, 20 and 100 (whole-second Retry-After), 5,000
 *      domains: fraction of the ideal time and share of 429s, enrich vs the plain fetch baseline,
 *      and vs a client told the ceiling that paces precisely (what jitter on this machine allows).
 *   6 also: a one-token bucket on a whole-millisecond clock, and a gateway counting per fixed second.
 *   7. latency: a 500 req/s ceiling, answers fixed at 200 ms, uniform in 100-300 ms (default flags and
 *      --concurrency 256), lognormal: fraction of the ceiling, beside the 16-worker fetch script.
 *   8. startup: --version, --help and a resume with nothing to do, over node -e ''.
 *   9. mechanisms: each speed mechanism kept beside its removal (issue 20; mechanisms.ts).
 *  10. team: the PostgreSQL store beside SQLite: 1,000,000 rows, 100 req/s with 20 ms between the
 *      client and PostgreSQL, unlimited (issues 21 and 23; team.ts).
 *  11. machines: two machines on one team store sharing one key's 100 req/s (issue 37; team.ts).
 *
 * BENCH_ONLY=rate,unlimited,scale,sandbox,buckets,latency,startup,mechanisms,team,machines picks sections;
 * BENCH_QUICK=1 shrinks them.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { uniqueDomainsCsv, writeInput } from './data.js';
import { buildBaseline, V01_REF } from './baseline-v01.js';
import { BIN, fmt, median, runMeasured, sandboxServer, sandboxStats, type Measured, type Server } from './lib.js';
import { mechanisms } from './mechanisms.js';
import { benchSandbox } from './sandbox.js';
import { team, twoMachines } from './team.js';

const only = new Set((process.env['BENCH_ONLY'] ?? 'rate,unlimited,scale,sandbox,buckets,latency,startup,mechanisms,team,machines').split(','));
const quick = process.env['BENCH_QUICK'] === '1';
const BASELINE = fileURLToPath(new URL('./baseline-fetch.mjs', import.meta.url));
const PACED = fileURLToPath(new URL('./baseline-paced.mjs', import.meta.url));
const work = mkdtempSync(join(tmpdir(), 'enrich-bench-'));
const lines: string[] = [];
const say = (line: string): void => {
  lines.push(line);
  console.log(line);
};

/** A run with a store of its own (so it buys everything), unless `extra` names one. */
let stores = 0;
const cli = (input: string, output: string, extra: string[] = []): [string, string[]] => [
  process.execPath,
  [BIN, input, '-o', output, '--quiet', ...(extra.includes('--store') ? [] : ['--store', join(work, `store-${stores++}.db`)]), ...extra],
];

async function rateLimited(): Promise<void> {
  const domains = quick ? 600 : 2000;
  const input = join(work, 'rate.csv');
  uniqueDomainsCsv(input, domains, domains / 2);
  const runs: Record<string, { achieved: number; share: number; wall: number }> = {};
  for (const [label, [cmd, args]] of [
    ['enrich', cli(input, join(work, 'rate.out.csv'))],
    ['baseline', [process.execPath, [BASELINE, input, join(work, 'rate.base.csv')]]],
  ] as const) {
    const server = await sandboxServer(['--rate-limit', '100']);
    const m = await runMeasured(cmd, [...args], { ENRICH_BASE_URL: server.url, ENRICH_API_KEY: 'sk_bench' });
    const stats = await sandboxStats(server);
    await server.stop();
    if (m.code !== 0) throw new Error(`${label} exited ${m.code}: ${m.stderr}`);
    const limited = stats.byStatus['429'] ?? 0;
    const accepted = stats.requests - limited;
    runs[label] = { achieved: accepted / ((stats.lastAt - stats.firstAt) / 1000), share: limited / stats.requests, wall: m.wallMs / 1000 };
  }
  const e = runs['enrich'] as { achieved: number; share: number; wall: number };
  const b = runs['baseline'] as { achieved: number; share: number; wall: number };
  say(`1. rate-limited (sandbox at 100 req/s, ${fmt(domains)} unique domains, ${fmt(domains * 1.5)} calls):`);
  say(`   enrich:   ${fmt(e.achieved, 1)} req/s accepted = ${fmt(e.achieved / 100, 3)} of the ceiling (target >= 0.95); 429 share ${fmt(e.share * 100, 2)}% (target <= 2%); ${fmt(e.wall, 1)} s end to end`);
  say(`   baseline: ${fmt(b.achieved, 1)} req/s accepted = ${fmt(b.achieved / 100, 3)} of the ceiling; 429 share ${fmt(b.share * 100, 2)}%; ${fmt(b.wall, 1)} s end to end`);
}

/**
 * 2. Unlimited: enrich, the fetch baseline and enrich 0.1 in rounds (A B C, B C A, C A B, ...), so each
 * ratio is taken within a round, under the same machine weather. 0.1 is the figure to hold: its
 * own ratio over the baseline is measured here rather than quoted from another day.
 */
async function unlimited(): Promise<void> {
  const domains = quick ? 5000 : 20_000;
  const input = join(work, 'unlimited.csv');
  uniqueDomainsCsv(input, domains, 6000);
  const rounds = quick ? 2 : 5;
  const v01 = buildBaseline();
  const server = await sandboxServer();
  const env = { ENRICH_BASE_URL: server.url, ENRICH_API_KEY: 'sk_bench' };
  const overFetch: number[] = [];
  const v01OverFetch: number[] = [];
  const overV01: number[] = [];
  const cliRates: number[] = [];
  const baseRates: number[] = [];
  // Peak RSS (MiB) of each program in each round: the memory row of issue 23 beside the same run's references.
  const peaks: Record<'enrich' | 'fetch' | 'v01', number[]> = { enrich: [], fetch: [], v01: [] };
  for (let i = 0; i < rounds; i++) {
    const [cmd, args] = cli(input, join(work, 'unlimited.out.csv'));
    const runs: (() => Promise<Measured>)[] = [
      () => runMeasured(cmd, args, env),
      () => runMeasured(process.execPath, [BASELINE, input, join(work, 'unlimited.base.csv')], env),
      () => runMeasured(process.execPath, [v01, input, '-o', join(work, 'unlimited.v01.csv'), '--quiet', '--journal', join(work, `unlimited-${i}.journal`)], env),
    ];
    // Each round starts with the next of the three, so none always runs after the same one.
    const measured: Measured[] = [];
    for (let k = 0; k < 3; k++) measured[(i + k) % 3] = await (runs[(i + k) % 3] as () => Promise<Measured>)();
    const [a, b, c] = measured as [Measured, Measured, Measured];
    if (a.code !== 0 || b.code !== 0 || c.code !== 0) throw new Error(`unlimited: exit ${a.code}/${b.code}/${c.code}: ${a.stderr}${b.stderr}${c.stderr}`);
    cliRates.push(domains / (a.wallMs / 1000));
    baseRates.push(domains / (b.wallMs / 1000));
    overFetch.push(b.wallMs / a.wallMs);
    v01OverFetch.push(b.wallMs / c.wallMs);
    overV01.push(a.wallMs / c.wallMs);
    peaks.enrich.push(a.peakMiB);
    peaks.fetch.push(b.peakMiB);
    peaks.v01.push(c.peakMiB);
  }
  await server.stop();
  const list = (xs: number[]): string => xs.map((r) => fmt(r, 2)).join(', ');
  say(`2. unlimited (${fmt(domains)} unique domains, 6,000 of them held: ${fmt(domains + 6000)} calls; median of ${rounds} rounds of enrich, baseline, enrich 0.1):`);
  say(`   enrich ${fmt(median(cliRates))} rows/s (store on, fsync'd intents) vs baseline ${fmt(median(baseRates))} rows/s: ${fmt(median(overFetch), 2)}x faster (target >= 2.5x; rounds ${list(overFetch)})`);
  say(`   enrich 0.1 in the same rounds: ${fmt(median(v01OverFetch), 2)}x the baseline (rounds ${list(v01OverFetch)}); enrich takes ${fmt(median(overV01), 2)}x 0.1's wall time (rounds ${list(overV01)})`);
  const mib = (xs: number[]): string => `${fmt(median(xs), 1)} MiB, rounds ${fmt(Math.min(...xs), 1)} to ${fmt(Math.max(...xs), 1)}`;
  say(`   peak RSS: enrich ${mib(peaks.enrich)} (target <= 143 MiB = 150 MB); the baseline ${mib(peaks.fetch)}; enrich 0.1 ${mib(peaks.v01)}`);
}

interface Limited {
  /** Requests answered other than 429, and 429s, as the sandbox counted them. */
  accepted: number;
  limited: number;
  /** From the sandbox's first request to its last, and the client's whole run, seconds. */
  span: number;
  wall: number;
}

/** Runs one client against a fresh sandbox started with `serverArgs`; what the sandbox saw. */
async function againstSandbox(serverArgs: string[], command: string, args: string[]): Promise<Limited> {
  const server = await sandboxServer(serverArgs);
  const m = await runMeasured(command, args, { ENRICH_BASE_URL: server.url, ENRICH_API_KEY: 'sk_bench' });
  const stats = await sandboxStats(server);
  await server.stop();
  if (m.code !== 0) throw new Error(`${command} ${args.join(' ')} exited ${m.code}: ${m.stderr}`);
  const limited = stats.byStatus['429'] ?? 0;
  return { accepted: stats.requests - limited, limited, span: (stats.lastAt - stats.firstAt) / 1000, wall: m.wallMs / 1000 };
}

/** Ideal time (accepted requests at the ceiling) over the time taken, server-side and end to end. */
function ofIdeal(r: Limited, ceiling: number): string {
  const ideal = r.accepted / ceiling;
  return `${fmt(ideal / r.span, 3)} of the ideal time (${fmt(ideal / r.wall, 3)} end to end); 429 share ${fmt((r.limited / (r.accepted + r.limited)) * 100, 2)}%`;
}

async function buckets(): Promise<void> {
  const domains = quick ? 1000 : 5000;
  const input = join(work, 'buckets.csv');
  // 71% of the domains are companies: 1.71 calls a domain, as in the 8,550 for 5,000.
  uniqueDomainsCsv(input, domains, Math.round(domains * 0.71));
  // The baseline crawls against a one-token bucket (every 429 idles a worker a second): it gets
  // a fifth of the domains, which is enough for its rate.
  const baseInput = join(work, 'buckets-base.csv');
  uniqueDomainsCsv(baseInput, domains / 5, Math.round((domains / 5) * 0.71));
  say(`6. buckets (100 req/s, Retry-After in whole seconds, ${fmt(domains)} unique domains, the baseline ${fmt(domains / 5)}; target >= 0.95 of the ideal time, <= 2% 429s):`);
  // The last two are what real gateways do (issue 23): a bucket on a whole-millisecond clock, and a
  // count per fixed second. Each beside a client told the ceiling in the same run.
  const kinds: [string, string[], number[]][] = [
    ['burst   1', ['--burst', '1'], [10.1, 10.5, 11]],
    ['burst  20', ['--burst', '20'], [10.1]],
    ['burst 100', ['--burst', '100'], [10.1]],
    ['burst   1, whole-ms clock', ['--burst', '1', '--clock-tick', '1'], [10.1, 10.5, 11]],
    ['fixed 1 s window', ['--fixed-window', '1000'], [10.1, 10.5]],
  ];
  for (const [label, extra, intervals] of kinds) {
    const server = ['--rate-limit', '100', ...extra];
    const e = await againstSandbox(server, ...cli(input, join(work, 'buckets.out.csv'), []));
    const b = await againstSandbox(server, process.execPath, [BASELINE, baseInput, join(work, 'buckets.base.csv')]);
    say(`   ${label}: enrich ${ofIdeal(e, 100)}, ${fmt(e.accepted + e.limited)} requests`);
    say(`              baseline ${ofIdeal(b, 100)}`);
    // What this machine allows at all: a client told the ceiling, pacing to a fraction of a ms.
    let best = 0;
    for (const interval of intervals) {
      const o = await againstSandbox(server, process.execPath, [PACED, baseInput, String(interval)]);
      best = Math.max(best, o.accepted / 100 / o.span);
      say(`              told the ceiling, paced every ${interval} ms: ${ofIdeal(o, 100)}`);
    }
    say(`              enrich / the best told the ceiling: ${fmt(e.accepted / 100 / e.span / best, 3)} (target >= 0.95, <= 5% 429s)`);
  }
}

async function latency(): Promise<void> {
  const domains = quick ? 1500 : 4000;
  const input = join(work, 'latency.csv');
  uniqueDomainsCsv(input, domains, domains / 2);
  const share = (r: Limited): string => `${fmt(r.accepted / r.span / 500, 3)} of the ceiling (${fmt(r.accepted / r.span, 1)} req/s accepted, ${fmt(r.limited)} 429s)`;
  say(`7. latency (500 req/s ceiling, ${fmt(domains * 1.5)} calls; target >= 0.95 for varying answers, no worse with a larger --concurrency):`);
  // The 16-worker fetch script and a fixed 200 ms (issue 11's figure) are the same-run references.
  const fixed = ['--rate-limit', '500', '--latency', '200'];
  const b = await againstSandbox(fixed, process.execPath, [BASELINE, input, join(work, 'latency.base.csv')]);
  for (const [label, latencyArg, extra] of [
    ['fixed 200 ms, default flags', '200', []],
    ['uniform 100-300 ms, default flags', '100-300', []],
    ['uniform 100-300 ms, --concurrency 256', '100-300', ['--concurrency', '256']],
    ['lognormal median 150 ms (sigma 0.6), default flags', 'lognormal:150:0.6:2000', []],
  ] as const) {
    const e = await againstSandbox(['--rate-limit', '500', '--latency', latencyArg], ...cli(input, join(work, 'latency.out.csv'), [...extra]));
    say(`   ${label}: enrich ${share(e)}; ${fmt(e.accepted / e.span / (b.accepted / b.span), 2)}x the baseline`);
  }
  say(`   baseline (16 workers, fixed 200 ms) ${share(b)}`);
}

/** Median wall time of each command over `runs` rounds, the commands interleaved within a round. */
async function medians(commands: [string, string[]][], runs: number, env: Record<string, string>): Promise<number[]> {
  const times: number[][] = commands.map(() => []);
  for (let i = 0; i < runs; i++) {
    for (const [j, [cmd, args]] of commands.entries()) {
      const m = await runMeasured(cmd, args, env);
      if (m.code !== 0) throw new Error(`${cmd} ${args.join(' ')} exited ${m.code}: ${m.stderr}`);
      (times[j] as number[]).push(m.wallMs);
    }
  }
  return times.map(median);
}

async function startup(): Promise<void> {
  const server = await sandboxServer();
  const env = { ENRICH_BASE_URL: server.url, ENRICH_API_KEY: 'sk_bench' };
  const input = join(work, 'startup.csv');
  uniqueDomainsCsv(input, 200, 100);
  const resumeArgs = [BIN, input, '-o', join(work, 'startup.out.csv'), '--quiet', '--store', join(work, 'startup.db')];
  const first = await runMeasured(process.execPath, resumeArgs, env);
  await server.stop();
  if (first.code !== 0) throw new Error(`startup: the first run exited ${first.code}: ${first.stderr}`);
  const [node, version, help, resumed] = await medians(
    [
      [process.execPath, ['-e', '']],
      [process.execPath, [BIN, '--version']],
      [process.execPath, [BIN, '--help']],
      [process.execPath, resumeArgs],
    ],
    quick ? 10 : 30,
    env,
  ) as [number, number, number, number];
  say(`8. startup (medians of ${quick ? 10 : 30} interleaved runs; node -e '' takes ${fmt(node, 1)} ms):`);
  say(`   --version ${fmt(version, 1)} ms = ${fmt(version / node, 2)}x, --help ${fmt(help, 1)} ms = ${fmt(help / node, 2)}x (target <= 1.5x)`);
  say(`   a resume with nothing to do (200 domains) ${fmt(resumed, 1)} ms = ${fmt(resumed / node, 2)}x (target <= 2x)`);
}

/** Scale and the store share a server: records are kept per service address. */
let shared: Server | undefined;
async function sharedServer(): Promise<Server> {
  shared ??= await sandboxServer();
  return shared;
}

function bytesOf(path: string): number {
  return ['', '-wal'].reduce((n, suffix) => n + (existsSync(path + suffix) ? statSync(path + suffix).size : 0), 0);
}

/**
 * 3. Scale and 4. the store, each beside enrich 0.1 (a journal per input) measured in the same
 * run on the same input: the full run (wall, peak RSS), the same input again once everything is
 * held (0.1: a resume of its finished journal), and what the store costs on disk per company.
 */
async function scale(): Promise<void> {
  const sizes = quick ? [10_000, 100_000] : [100_000, 1_000_000];
  const server = await sharedServer();
  const env = { ENRICH_BASE_URL: server.url, ENRICH_API_KEY: 'sk_bench' };
  const v01 = buildBaseline();
  const floor = await runMeasured(process.execPath, [BIN, '--version'], env);
  say(`3. scale (rows drawn from 50,000 registrable domains under messy spellings; beside enrich 0.1 (${V01_REF}) on the same input; the floor, enrich --version, peaks at ${fmt(floor.peakMiB, 1)} MiB):`);
  const peaks: number[] = [];
  for (const rows of sizes) {
    const input = join(work, `scale-${rows}.csv`);
    await writeInput(input, rows, 50_000);
    const store = join(work, `scale-${rows}.db`);
    const journal = join(work, `scale-${rows}.journal`);
    const today = (): Promise<Measured> => runMeasured(process.execPath, [BIN, input, '-o', join(work, 'scale.out.csv'), '--quiet', '--store', store], env);
    const before = (): Promise<Measured> => runMeasured(process.execPath, [v01, input, '-o', join(work, 'scale.v01.csv'), '--quiet', '--journal', journal], env);
    const a = await today();
    const b = await before();
    if (a.code !== 0 || b.code !== 0) throw new Error(`scale ${rows}: exit ${a.code}/${b.code}: ${a.stderr}${b.stderr}`);
    peaks.push(a.peakMiB);
    say(`   ${fmt(rows).padStart(9)} rows: ${fmt(a.wallMs / 1000, 1)} s, peak RSS ${fmt(a.peakMiB, 1)} MiB (${fmt(a.peakMiB * 1.048576, 0)} MB; target < 250 MB) vs 0.1 ${fmt(b.wallMs / 1000, 1)} s, ${fmt(b.peakMiB, 1)} MiB: wall ${fmt(a.wallMs / b.wallMs, 2)}x, peak ${fmt(a.peakMiB / b.peakMiB, 2)}x`);
    if (rows !== sizes[sizes.length - 1]) continue;
    // The same input again, everything held: A B A B A B.
    const again: Measured[] = [];
    const resumed: Measured[] = [];
    for (let i = 0; i < 3; i++) {
      again.push(await today());
      resumed.push(await before());
    }
    const held = JSON.parse(execFileSync(process.execPath, [BIN, 'ledger', '--json', '--store', store], { encoding: 'utf8' })) as { services: { companies: number; lookups: number }[] };
    const companies = held.services[0]?.companies ?? 0;
    const wall = (ms: Measured[]): number => median(ms.map((m) => m.wallMs));
    say(`4. the store, ${fmt(rows)} rows again with every company held (median of 3 A/B pairs):`);
    say(`   ${fmt(wall(again) / 1000, 2)} s, peak ${fmt(median(again.map((m) => m.peakMiB)), 1)} MiB, 0 bought vs 0.1 resuming its finished journal: ${fmt(wall(resumed) / 1000, 2)} s, ${fmt(median(resumed.map((m) => m.peakMiB)), 1)} MiB (${fmt(wall(again) / wall(resumed), 2)}x); ${fmt(wall(again) / a.wallMs, 3)}x the full run`);
    say(`   on disk: store ${fmt(bytesOf(store) / 1024, 0)} KiB for ${fmt(companies)} companies and ${fmt(held.services[0]?.lookups ?? 0)} lookups = ${fmt(bytesOf(store) / companies / 1024, 2)} KiB per company; 0.1's journal ${fmt(statSync(journal).size / companies / 1024, 2)} KiB per company`);
  }
  say(`   ${fmt(sizes[1] as number)} rows over ${fmt(sizes[0] as number)}: ${fmt((peaks[1] as number) / (peaks[0] as number), 2)}x the memory for ${fmt((sizes[1] as number) / (sizes[0] as number), 0)}x the rows (nearly flat)`);
}

const started = new Date();
say(`enrich bench, ${started.toISOString().slice(0, 10)}, node ${process.versions.node}, ${cpus().length} x ${cpus()[0]?.model ?? 'cpu'}${quick ? ' (quick)' : ''}`);
try {
  if (only.has('rate')) await rateLimited();
  if (only.has('unlimited')) await unlimited();
  if (only.has('scale')) await scale();
  if (only.has('sandbox')) {
    say('5. sandbox:');
    for (const line of await benchSandbox(quick ? 2 : 5)) say(`   ${line}`);
  }
  if (only.has('buckets')) await buckets();
  if (only.has('latency')) await latency();
  if (only.has('startup')) await startup();
  if (only.has('mechanisms')) await mechanisms(say, work, quick);
  if (only.has('team')) await team(say, work, quick);
  if (only.has('machines')) await twoMachines(say, work, quick);
} finally {
  await shared?.stop();
  rmSync(work, { recursive: true, force: true });
}
