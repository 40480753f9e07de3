/**
 * npm run bench: the performance figures of issue 5, each beside a baseline measured in the
 * same run (the machine is shared and noisy, so ratios are what to quote).
 *
 *   1. rate-limited: the sandbox at 100 req/s; achieved rate over the ceiling, share of 429s,
 *      and the same for the plain fetch baseline.
 *   2. unlimited: rows/s end to end for 20,000 unique domains, CLI (journal on) vs baseline.
 *   3. scale: peak RSS at 100,000 and 1,000,000 rows, vs the process floor (enrich --version).
 *   4. resume: a finished 1,000,000-row journal, vs the full run that wrote it.
 *   5. sandbox: match/enrich req/s and server CPU per request, vs a bare node:http server.
 *
 * BENCH_ONLY=rate,unlimited,scale,resume,sandbox picks sections; BENCH_QUICK=1 shrinks them.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { fixtureCompanies, writeInput } from './data.js';
import { BIN, fmt, median, runMeasured, sandboxServer, sandboxStats, type Server } from './lib.js';
import { benchSandbox } from './sandbox.js';

const only = new Set((process.env['BENCH_ONLY'] ?? 'rate,unlimited,scale,resume,sandbox').split(','));
const quick = process.env['BENCH_QUICK'] === '1';
const BASELINE = fileURLToPath(new URL('./baseline-fetch.mjs', import.meta.url));
const work = mkdtempSync(join(tmpdir(), 'enrich-bench-'));
const lines: string[] = [];
const say = (line: string): void => {
  lines.push(line);
  console.log(line);
};

/** `count` unique domains: `hits` fixture companies, the rest unknown to the service, shuffled. */
function uniqueDomainsCsv(path: string, count: number, hits: number): void {
  const known = fixtureCompanies().map((c) => c.domain).slice(0, hits);
  const all = [...known, ...Array.from({ length: count - known.length }, (_, i) => `unlisted-${i.toString(36)}.com`)];
  for (let i = all.length - 1; i > 0; i--) {
    const j = (i * 7919 + 13) % (i + 1);
    [all[i], all[j]] = [all[j] as string, all[i] as string];
  }
  writeFileSync(path, `domain\n${all.join('\n')}\n`);
}

const cli = (input: string, output: string, extra: string[] = []): [string, string[]] => [process.execPath, [BIN, input, '-o', output, '--quiet', '--fresh', ...extra]];

async function rateLimited(): Promise<void> {
  const domains = quick ? 600 : 2000;
  const input = join(work, 'rate.csv');
  uniqueDomainsCsv(input, domains, domains / 2);
  const runs: Record<string, { achieved: number; share: number; wall: number }> = {};
  for (const [label, [cmd, args]] of [
    ['enrich', cli(input, join(work, 'rate.out.csv'), ['--journal', join(work, 'rate.journal')])],
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

async function unlimited(): Promise<void> {
  const domains = quick ? 5000 : 20_000;
  const input = join(work, 'unlimited.csv');
  uniqueDomainsCsv(input, domains, 6000);
  const pairs = quick ? 2 : 3;
  const server = await sandboxServer();
  const env = { ENRICH_BASE_URL: server.url, ENRICH_API_KEY: 'sk_bench' };
  const ratios: number[] = [];
  const cliRates: number[] = [];
  const baseRates: number[] = [];
  for (let i = 0; i < pairs; i++) {
    // A B A B: each pair sees the same machine weather.
    const [cmd, args] = cli(input, join(work, 'unlimited.out.csv'), ['--journal', join(work, `unlimited-${i}.journal`)]);
    const a = await runMeasured(cmd, args, env);
    const b = await runMeasured(process.execPath, [BASELINE, input, join(work, 'unlimited.base.csv')], env);
    if (a.code !== 0 || b.code !== 0) throw new Error(`unlimited: exit ${a.code}/${b.code}: ${a.stderr}${b.stderr}`);
    cliRates.push(domains / (a.wallMs / 1000));
    baseRates.push(domains / (b.wallMs / 1000));
    ratios.push(b.wallMs / a.wallMs);
  }
  await server.stop();
  say(`2. unlimited (${fmt(domains)} unique domains, 6,000 of them held: ${fmt(domains + 6000)} calls; median of ${pairs} A/B pairs):`);
  say(`   enrich ${fmt(median(cliRates))} rows/s (journal on, fsync'd intents) vs baseline ${fmt(median(baseRates))} rows/s: ${fmt(median(ratios), 2)}x faster (target >= 1.3x; pairs ${ratios.map((r) => fmt(r, 2)).join(', ')})`);
}

let fullRunMs = 0;
/** Scale and resume share a server: a journal belongs to the service address that wrote it. */
let shared: Server | undefined;
async function sharedServer(): Promise<Server> {
  shared ??= await sandboxServer();
  return shared;
}

async function scale(): Promise<void> {
  const sizes = quick ? [10_000, 100_000] : [100_000, 1_000_000];
  const server = await sharedServer();
  const env = { ENRICH_BASE_URL: server.url, ENRICH_API_KEY: 'sk_bench' };
  const floor = await runMeasured(process.execPath, [BIN, '--version'], env);
  const peaks: number[] = [];
  say(`3. scale (rows drawn from 50,000 registrable domains under messy spellings; the floor, enrich --version, peaks at ${fmt(floor.peakMiB, 1)} MiB):`);
  for (const rows of sizes) {
    const input = join(work, `scale-${rows}.csv`);
    await writeInput(input, rows, 50_000);
    const m = await runMeasured(...cli(input, join(work, `scale-${rows}.out.csv`)), env);
    if (m.code !== 0) throw new Error(`scale ${rows}: exit ${m.code}: ${m.stderr}`);
    peaks.push(m.peakMiB);
    if (rows === sizes[1]) fullRunMs = m.wallMs;
    say(`   ${fmt(rows).padStart(9)} rows: peak RSS ${fmt(m.peakMiB, 1)} MiB (${fmt((m.peakMiB * 1.048576), 0)} MB; ${fmt(m.peakMiB / floor.peakMiB, 2)}x the floor), ${fmt(m.wallMs / 1000, 1)} s, ${fmt(rows / (m.wallMs / 1000))} rows/s`);
  }
  say(`   ${fmt(sizes[1] as number)} rows over ${fmt(sizes[0] as number)}: ${fmt((peaks[1] as number) / (peaks[0] as number), 2)}x the memory for ${fmt((sizes[1] as number) / (sizes[0] as number), 0)}x the rows (target: under 200 MB at 1M, nearly flat)`);
}

async function resume(): Promise<void> {
  const rows = quick ? 100_000 : 1_000_000;
  const input = join(work, `scale-${rows}.csv`);
  const server = await sharedServer();
  const env = { ENRICH_BASE_URL: server.url, ENRICH_API_KEY: 'sk_bench' };
  if (fullRunMs === 0) {
    await writeInput(input, rows, 50_000);
    const m = await runMeasured(...cli(input, join(work, 'resume.out.csv')), env);
    fullRunMs = m.wallMs;
  }
  const times: number[] = [];
  const peaks: number[] = [];
  for (let i = 0; i < 3; i++) {
    // The same command again: finds the finished journal, buys nothing, rewrites the output.
    const m = await runMeasured(process.execPath, [BIN, input, '-o', join(work, 'resume.out.csv'), '--quiet'], env);
    if (m.code !== 0) throw new Error(`resume: exit ${m.code}: ${m.stderr}`);
    times.push(m.wallMs);
    peaks.push(m.peakMiB);
  }
  say(`4. resume of a finished ${fmt(rows)}-row journal: ${fmt(median(times) / 1000, 2)} s (median of 3), peak ${fmt(median(peaks), 1)} MiB; ${fmt(median(times) / fullRunMs, 3)}x the full run that wrote it (${fmt(fullRunMs / 1000, 1)} s)`);
}

const started = new Date();
say(`enrich bench, ${started.toISOString().slice(0, 10)}, node ${process.versions.node}, ${cpus().length} x ${cpus()[0]?.model ?? 'cpu'}${quick ? ' (quick)' : ''}`);
try {
  if (only.has('rate')) await rateLimited();
  if (only.has('unlimited')) await unlimited();
  if (only.has('scale')) await scale();
  if (only.has('resume')) await resume();
  if (only.has('sandbox')) {
    say('5. sandbox:');
    for (const line of await benchSandbox(quick ? 2 : 5)) say(`   ${line}`);
  }
} finally {
  await shared?.stop();
  rmSync(work, { recursive: true, force: true });
}
