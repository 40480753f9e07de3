// Figures of every simulated case of test/unit/flow.test.ts, with the bounds it asserts: npx tsx test/sim/figures.ts [name]
import type { LatencySpec } from '../../src/sandbox/latency.js';
import { simulate, simulatePaced, simulatePasses, type SimServerOptions } from '../helpers/sim.js';
const UNIFORM: LatencySpec = { kind: 'uniform', minMs: 100, maxMs: 300 };
const LONG_TAIL: LatencySpec = { kind: 'lognormal', medianMs: 150, sigma: 0.6, maxMs: 2000 };
const WAY: LatencySpec = { kind: 'lognormal', medianMs: 0.1, sigma: 1.2, maxMs: 50 };
const f = (x: number): string => x.toFixed(3);
const only = process.argv[2];
const show = async (name: string, fn: () => Promise<string>): Promise<void> => {
  if (only !== undefined && !name.includes(only)) return;
  const t0 = Date.now();
  try { console.log(name.padEnd(28), await fn(), `(${Date.now() - t0} ms)`); } catch (e) { console.log(name, 'FAILED', (e as Error).message); }
};
for (const burst of [1, 20, 100]) await show(`bucket ${burst}`, async () => { const r = await simulate({ rate: 100, burst, latencyMs: 20 }, 5000); return `eff ${f(r.efficiency)}>=.95 429 ${f(r.share429)}<=.02 pauses ${r.pauses}<=1`; });
await show('jitter 1ms b20', async () => { const r = await simulate({ rate: 100, burst: 20, latencyMs: 20, jitterMs: 1 }, 5000); return `eff ${f(r.efficiency)}>=.95 429 ${f(r.share429)}<=.02`; });
await show('500@200ms', async () => { const r = await simulate({ rate: 500, burst: 500, latencyMs: 200 }, 10_000); return `eff ${f(r.efficiency)}>=.9 429 ${f(r.share429)}<=.02 peak ${r.peakInFlight}>80`; });
await show('busy', async () => { const r = await simulate({ rate: 1e9, burst: 1e9, latencyMs: 2, capacity: 2000 }, 4000); return `tput ${f(r.accepted / (r.elapsedMs / 1000) / 2000)}>=.95 meanInFlight ${r.meanInFlight.toFixed(1)}<64`; });
await show('spread', async () => { const r = await simulate({ rate: 500, burst: 500, latencyMs: 200, spread: 1.2 }, 10_000); return `eff ${f(r.efficiency)}>=.9 429 ${f(r.share429)}<=.02`; });
await show('passes', async () => { const out: string[] = []; for (const seed of [1, 2, 3]) { const { purchaseMs } = await simulatePasses({ rate: 200, burst: 20, latencyMs: 50, seed }, 4200, { dryFirstMs: 5000, known: 4000 }); const s = await simulate({ rate: 200, burst: 20, latencyMs: 50, seed }, 100); out.push(`${purchaseMs}<=23100 short ${s.elapsedMs}<=2750`); } return out.join(' | '); });
await show('cap 24', async () => { const r = await simulate({ rate: 500, burst: 500, latencyMs: 200 }, 1000, 24); return `peak ${r.peakInFlight}<=24`; });
await show('low ceiling', async () => { const r = await simulate({ rate: 10, burst: 10, latencyMs: 50 }, 300); return `eff ${f(r.efficiency)}>=.9`; });
for (const [name, latency] of [['uniform', UNIFORM], ['longtail', LONG_TAIL]] as const) {
  await show(`500 ${name}`, async () => { const out: string[] = []; for (const c of [128, 256]) for (const seed of [1, 2]) { const r = await simulate({ rate: 500, burst: 500, latencyMs: 0, latency, seed }, 3000, c); out.push(`${c}/${seed}: ${f(r.ofCeiling)} ${f(r.share429)}`); } return out.join(' | ') + ' (>=.93 each, mean>=.95, 429<=.02)'; });
}
await show('end 5 seeds', async () => { const rs = []; for (let i = 0; i < 5; i++) rs.push((await simulate({ rate: 500, burst: 500, latencyMs: 0, latency: UNIFORM, seed: 100 + i }, 3000)).ofCeiling); return rs.map(f).join(' ') + ' (min>=.93, <=1 under .95)'; });
await show('endgame 5 seeds', async () => { const rs = []; for (let i = 0; i < 5; i++) rs.push((await simulatePasses({ rate: 500, burst: 500, latencyMs: 0, latency: LONG_TAIL, seed: 200 + i }, 4000, { missEvery: 2 })).result.ofCeiling); return rs.map(f).join(' ') + ' (min>=.95, median>=.98)'; });
const besideTold = async (server: SimServerOptions, domains = 2500): Promise<string> => {
  let best = { ms: 0, of: 0 };
  for (const ms of [10.1, 10.25, 10.5, 10.75, 11, 11.5].map((ms) => (ms * 100) / server.rate)) { const r = await simulatePaced({ ...server, seed: 1 }, domains, ms); if (r.ofCeiling > best.of) best = { ms, of: r.ofCeiling }; }
  const out: string[] = [];
  for (const seed of [1, 2]) { const told = seed === 1 ? best.of : (await simulatePaced({ ...server, seed }, domains, best.ms)).ofCeiling; const r = await simulate({ ...server, seed }, domains); out.push(`${f(r.ofCeiling / told)} 429 ${f(r.share429)}`); }
  return out.join(' | ') + ' (mean>=.95, each>=.93, 429<=.05)';
};
await show('1tok uniform way', () => besideTold({ rate: 100, burst: 1, latencyMs: 20, way: { kind: 'uniform', minMs: 0, maxMs: 1 } }));
await show('1tok longtail way', () => besideTold({ rate: 100, burst: 1, latencyMs: 20, way: WAY }));
await show('1tok local', () => besideTold({ rate: 100, burst: 1, latencyMs: 1, way: WAY }));
await show('1tok whole ms', () => besideTold({ rate: 100, burst: 1, latencyMs: 20, way: WAY, tickMs: 1 }));
await show('fixed window', () => besideTold({ rate: 100, burst: 1, latencyMs: 20, way: WAY, windowMs: 1000 }));
// Where a change for two machines could cost one (a review's cases): a slow deep bucket, a ceiling that falls, a slow one-token bucket.
await show('10/s bucket 100', async () => { const out: string[] = []; for (const seed of [1, 2, 3]) { const r = await simulate({ rate: 10, burst: 100, latencyMs: 20, seed }, 1500); out.push(`${f(r.ofCeiling)} 429 ${f(r.share429)}`); } return out.join(' | '); });
await show('falls 100->10', async () => { const out: string[] = []; for (const seed of [1, 2, 3]) { const r = await simulate({ rate: 100, burst: 20, latencyMs: 20, seed, falls: { atMs: 20_000, rate: 10 } }, 2500); out.push(`429 ${f(r.share429)} ${(r.elapsedMs / 1000).toFixed(0)}s`); } return out.join(' | '); });
await show('1tok 5/s', () => besideTold({ rate: 5, burst: 1, latencyMs: 20, way: WAY }, 600));
