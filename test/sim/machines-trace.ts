// Trace two machines' paces on one key: npx tsx test/sim/machines-trace.ts [seed]
import { simulateMachines } from '../helpers/sim.js';
const seed = Number(process.argv[2] ?? 1);
const r = await simulateMachines({ rate: 100, burst: 20, latencyMs: 2, seed, way: { kind: 'lognormal', medianMs: 0.1, sigma: 1.2, maxMs: 50 } }, Number(process.env.DOMAINS ?? 600), 2, Number(process.env.STAGGER ?? 0), (flow, clock, m) => {
  const tick = async (): Promise<void> => {
    for (;;) {
      await clock.sleep(500);
      const f = flow as unknown as Record<string, number | string | boolean>;
      console.log(`m${m}`, (clock.now() / 1000).toFixed(1), 'rate', Number(f.rate).toFixed(1), 'thr', Number(f.threshold).toFixed(1), 'win', f.window, f.slowStart ? 'slow' : '', f.depth, 'wait', f.waiting, 'paused', Math.max(0, Number(f.pausedUntil) - clock.now()).toFixed(0), 'pauses', f.pauses);
    }
  };
  void tick();
});
console.log(JSON.stringify(r));
