import { readFileSync } from 'node:fs';
import { fmt, load, plainServer, sandboxServer } from './lib.js';

/**
 * Sandbox throughput: match requests a second with keep-alive, and server CPU per request,
 * beside a bare node:http server answering a fixed body (the floor) in the same run.
 */
export async function benchSandbox(seconds = 5): Promise<string[]> {
  const domains = readFileSync(new URL('../../fixtures/companies.jsonl', import.meta.url), 'utf8')
    .trim()
    .split('\n')
    .map((l) => (JSON.parse(l) as { domain: string }).domain);
  // Half hits, half misses, as a real batch sees.
  const path = (i: number): string => `/api/v1/public/company/match?domain=${i % 2 === 0 ? (domains[i % domains.length] as string) : `unknown-${i}.com`}`;
  const headers = { authorization: 'Bearer sk_bench' };
  const lines: string[] = [];
  const plain = await plainServer();
  const floor = await load(plain, path, { seconds, inFlight: 64, headers });
  await plain.stop();
  const sandbox = await sandboxServer();
  const match = await load(sandbox, path, { seconds, inFlight: 64, headers });
  // Paid calls, each under its own Idempotency-Key, all hits: the heaviest path (charge, ledger, record).
  const enrich = await load(sandbox, () => '/api/v1/public/company/enrich', {
    seconds,
    inFlight: 64,
    headers,
    post: (i) => ({ body: JSON.stringify({ domain: domains[i % domains.length] }), headers: { 'content-type': 'application/json', 'idempotency-key': `bench-${i}` } }),
  });
  await sandbox.stop();
  lines.push(
    `sandbox match, keep-alive, 64 in flight: ${fmt(match.perSecond)} req/s (${fmt(match.ok)} of ${fmt(match.requests)} ok), ` +
      `server CPU ${fmt(match.serverCpuMsPerRequest, 3)} ms/request, p50 ${fmt(match.p50ms, 2)} ms, p99 ${fmt(match.p99ms, 2)} ms`,
    `sandbox enrich (paid, idempotent), 64 in flight: ${fmt(enrich.perSecond)} req/s (${fmt(enrich.ok)} ok), server CPU ${fmt(enrich.serverCpuMsPerRequest, 3)} ms/request, p99 ${fmt(enrich.p99ms, 2)} ms`,
    `bare node:http floor, same load:         ${fmt(floor.perSecond)} req/s, server CPU ${fmt(floor.serverCpuMsPerRequest, 3)} ms/request`,
    `ratio sandbox/floor: throughput ${fmt(match.perSecond / floor.perSecond, 2)}, CPU per request ${fmt(match.serverCpuMsPerRequest / floor.serverCpuMsPerRequest, 2)}`,
  );
  return lines;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  for (const line of await benchSandbox(Number(process.env['BENCH_SECONDS'] ?? 5))) console.log(line);
}
