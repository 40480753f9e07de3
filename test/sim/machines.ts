// Two machines on one key, simulated: npx tsx test/sim/machines.ts [staggerMs]
import { simulateMachines } from '../helpers/sim.js';
const stagger = Number(process.argv[2] ?? 0);
const out: string[] = [];
for (const seed of [1, 2, 3]) {
  const r = await simulateMachines({ rate: 100, burst: 20, latencyMs: 2, seed, way: { kind: 'lognormal', medianMs: 0.1, sigma: 1.2, maxMs: 50 } }, Number(process.env.DOMAINS ?? 600), 2, stagger);
  out.push(`${r.ofCeiling.toFixed(3)} 429 ${(r.share429 * 100).toFixed(2)}% ${(r.elapsedMs / 1000).toFixed(1)}s`);
}
console.log(out.join(' | '));
