// Explore the limiter against simulated token-bucket services: npx tsx test/sim/explore.ts
// (prints efficiency and 429 share per case; the asserted cases live in test/unit/limiter.test.ts).
import { simulate } from '../helpers/sim.js';
const cases = [
  { rate: 100, burst: 100, latencyMs: 20 },
  { rate: 100, burst: 1, latencyMs: 20 },
  { rate: 100, burst: 20, latencyMs: 20 },
  { rate: 100, burst: 20, latencyMs: 20, jitterMs: 1 },
  { rate: 10, burst: 10, latencyMs: 50 },
  { rate: 40, burst: 2, latencyMs: 5 },
  { rate: 1000, burst: 1000, latencyMs: 10 },
  { rate: 100, burst: 100, latencyMs: 200 },
  { rate: 500, burst: 500, latencyMs: 200 },
];
for (const c of cases) {
  const domains = Math.round(c.rate * 30);
  const t0 = Date.now();
  try {
    const r = await simulate(c, domains, Number(process.env.CONC ?? 128));
    console.log(JSON.stringify(c), `calls=${r.accepted} 429=${r.rateLimited} sim=${(r.elapsedMs/1000).toFixed(1)}s eff=${r.efficiency.toFixed(3)} share429=${(r.share429*100).toFixed(2)}% pauses=${r.pauses} peak=${r.peakInFlight} real=${Date.now()-t0}ms`);
  } catch (e) { console.log(JSON.stringify(c), 'FAILED', (e as Error).message, `real=${Date.now()-t0}ms`); }
}
