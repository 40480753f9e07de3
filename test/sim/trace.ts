// Trace the flow's pace and window over a simulated run: npx tsx test/sim/trace.ts '<server JSON>' domains
import { simulate } from '../helpers/sim.js';
const server = JSON.parse(process.argv[2] ?? '{"rate":100,"burst":1,"latencyMs":20}');
const every = Number(process.env.EVERY ?? 500);
const r = await simulate(server, Number(process.argv[3] ?? 1000), Number(process.env.CONC ?? 128), (flow, clock) => {
  const tick = async (): Promise<void> => {
    for (;;) {
      await clock.sleep(every);
      const f = flow as unknown as Record<string, number | string | boolean>;
      console.log((clock.now() / 1000).toFixed(2), Number(f.rate).toFixed(1), 'win', f.window, 'slow', f.slowStart, f.depth, 'wait', f.waiting, 'inF', f.inFlight);
    }
  };
  void tick();
});
console.log(JSON.stringify(r));
