// Two machines on one key, simulated: npx tsx test/sim/machines.ts [staggerMs]
// DOMAINS sets each machine's input (600); TRACE=1 prints each machine's pace instead, every EVERY ms (500) of seed SEED (1).
import type { Flow } from '../../src/pipeline/flow.js';
import { simulateMachines, type SimClock } from '../helpers/sim.js';
const stagger = Number(process.argv[2] ?? 0);
const domains = Number(process.env.DOMAINS ?? 600);
const trace = process.env.TRACE === '1';
const observe = (flow: Flow, clock: SimClock, m: number): void => {
  const tick = async (): Promise<void> => {
    for (;;) {
      await clock.sleep(Number(process.env.EVERY ?? 500));
      const f = flow as unknown as Record<string, number | string | boolean>;
      console.log(`m${m}`, (clock.now() / 1000).toFixed(1), 'rate', Number(f.rate).toFixed(1), 'thr', Number(f.threshold).toFixed(1), 'win', f.window, f.slowStart ? 'slow' : '', f.depth, 'wait', f.waiting, 'paused', Math.max(0, Number(f.pausedUntil) - clock.now()).toFixed(0), 'pauses', f.pauses);
    }
  };
  void tick();
};
// RATE and BURST set the key (100 req/s, 20); SEEDS=n runs seeds 1..n (3); the last line gives the least and median share of the ceiling, and the most 429s.
const out: string[] = [];
const shares: number[] = [];
let most429 = 0;
for (const seed of trace ? [Number(process.env.SEED ?? 1)] : Array.from({ length: Number(process.env.SEEDS ?? 3) }, (_, i) => i + 1)) {
  const r = await simulateMachines({ rate: Number(process.env.RATE ?? 100), burst: Number(process.env.BURST ?? 20), latencyMs: 2, seed, way: { kind: 'lognormal', medianMs: 0.1, sigma: 1.2, maxMs: 50 } }, domains, 2, stagger, trace ? observe : undefined);
  out.push(`${r.ofCeiling.toFixed(3)} 429 ${(r.share429 * 100).toFixed(2)}% ${(r.elapsedMs / 1000).toFixed(1)}s`);
  shares.push(r.ofCeiling);
  most429 = Math.max(most429, r.share429);
}
console.log(out.join(' | '));
shares.sort((a, b) => a - b);
console.log(`least ${(shares[0] ?? 0).toFixed(3)} median ${(shares[Math.floor(shares.length / 2)] ?? 0).toFixed(3)} most 429s ${(most429 * 100).toFixed(2)}%`);
