import { describe, expect, it } from 'vitest';
import { RateLimitedError } from '../../src/api/errors.js';
import { Flow, StoppedError } from '../../src/pipeline/flow.js';
import { PEER_POLL_MS } from '../../src/pipeline/execute.js';
import type { LatencySpec } from '../../src/sandbox/latency.js';
import { SimClock, simulate, simulateMachines, simulatePaced, simulatePasses, type SimResult, type SimServerOptions } from '../helpers/sim.js';

const refusal = (retryAfterSeconds = 1): RateLimitedError => new RateLimitedError({ status: 429, code: 'rate_limited', message: 'rate_limited (HTTP 429)', requestId: undefined, problem: undefined, definitive: true }, retryAfterSeconds);

/** The way there: most requests on time, one in forty over a millisecond late (loopback on a shared machine). */
const WAY: LatencySpec = { kind: 'lognormal', medianMs: 0.1, sigma: 1.2, maxMs: 50 };

/** A request that the service answers after `ms`, with a 429 when `refuse` says so. */
const request = (clock: SimClock, ms: number, refuse = false) => async (): Promise<void> => {
  await clock.sleep(ms);
  if (refuse) throw refusal();
};

describe('Flow (its rules, on simulated time)', () => {
  it('sends paid enriches before free matches queued earlier', async () => {
    const clock = new SimClock();
    const flow = new Flow(clock, 1);
    const order: string[] = [];
    const job = (name: string) => async () => {
      order.push(name);
      await clock.sleep(10);
    };
    const all = [flow.run('match', job('m1')), flow.run('match', job('m2')), flow.run('match', job('m3')), flow.run('enrich', job('e1')), flow.run('enrich', job('e2'))];
    await clock.run(Promise.all(all), 10_000);
    expect(order).toStrictEqual(['m1', 'e1', 'e2', 'm2', 'm3']);
  });

  it('holds every request once at the first 429, then spaces them at the pace learned', async () => {
    const clock = new SimClock();
    const flow = new Flow(clock, 16);
    // Twenty accepted over the first second, then a refusal: paced at 20 a second after a 2 s pause.
    for (let i = 0; i < 20; i++) await clock.run(flow.run('match', request(clock, 50)), 10_000);
    await clock.run(clock.sleep(1000 - clock.now()), 10_000);
    await clock.run(flow.run('match', async () => { throw refusal(2); }).catch(() => {}), 10_000);
    expect(flow.paced).toBe(true);
    expect(flow.rate).toBeCloseTo(20, 0);
    const [refusedAt, learned] = [clock.now(), flow.rate];
    const sent: number[] = [];
    await clock.run(Promise.all(Array.from({ length: 5 }, () => flow.run('match', async () => void sent.push(clock.now())))), 60_000);
    expect(sent[0]).toBeGreaterThanOrEqual(refusedAt + 2000);
    // One interval apart, never a burst: at the pace learned, or the faster one slow start grew to.
    for (let i = 1; i < sent.length; i++) {
      const gap = (sent[i] as number) - (sent[i - 1] as number);
      expect(gap).toBeGreaterThanOrEqual(1000 / flow.rate - 1e-9);
      expect(gap).toBeLessThanOrEqual(1000 / learned + 1e-9);
    }
    expect(flow.pauses).toBe(1);
  });

  it('rejects a waiting request whose caller gives up, and lets the process go during a long pause', async () => {
    const { systemClock } = await import('../../src/pipeline/clock.js');
    // The flow's own waits are counted (each a timer of the real clock until it settles).
    let pending = 0;
    const counted = <T,>(wait: Promise<T>): Promise<T> => {
      pending++;
      return wait.finally(() => pending--);
    };
    const clock = { ...systemClock, sleep: (ms: number, signal?: AbortSignal) => counted(systemClock.sleep(ms, signal)), until: (at: number, signal?: AbortSignal) => counted(systemClock.until(at, signal)) };
    const flow = new Flow(clock, 4);
    await flow.run('match', async () => { throw refusal(30); }).catch(() => {}); // the first 429: everyone waits 30 s
    const quit = new AbortController();
    const waiting = flow.run('match', async () => {}, quit.signal);
    await new Promise((r) => setImmediate(r));
    expect(pending).toBeGreaterThan(0);
    quit.abort();
    await expect(waiting).rejects.toBeInstanceOf(StoppedError);
    await new Promise((r) => setImmediate(r));
    expect(pending).toBe(0);
  });

  it('takes a first wave refused nearly whole for a one-token bucket: no pause, a request a round trip', async () => {
    const clock = new SimClock();
    const flow = new Flow(clock, 4);
    // Four at once: the first accepted in 20 ms, three refused (a 1 s Retry-After) at once.
    const wave = [flow.run('match', request(clock, 20)), ...[1, 2, 3].map(() => flow.run('match', request(clock, 1, true)).catch(() => {}))];
    await clock.run(Promise.all(wave), 10_000);
    expect(flow.pausedUntil).toBeLessThanOrEqual(clock.now());
    expect(flow.rate).toBeCloseTo(50, 5);
    const before = clock.now();
    await clock.run(Promise.all([flow.run('match', request(clock, 0)), flow.run('match', request(clock, 0))]), 10_000);
    expect(clock.now() - before).toBeLessThanOrEqual(20); // not the second the Retry-After asked of the three
  });

  it('cuts a bucket of unknown depth for sparse refusals only past the share jitter explains', async () => {
    // Two in flight, both refused: a first wave too small to tell a one-token bucket from a deep one.
    const cutsAt = async (every: number): Promise<number> => {
      const clock = new SimClock();
      const flow = new Flow(clock, 2);
      await clock.run(Promise.all([1, 2].map(() => flow.run('match', request(clock, 1, true)).catch(() => {}))), 10_000);
      let cuts = 0;
      let i = 0;
      const call = async (): Promise<void> => {
        await clock.sleep(5);
        if (++i % every !== 0) return;
        const before = flow.rate;
        setImmediate(() => void (flow.rate < before && cuts++)); // after the flow has taken the refusal
        throw refusal();
      };
      await clock.run(Promise.all(Array.from({ length: 1000 }, () => flow.run('match', call).catch(() => {}))), 3_600_000);
      return cuts;
    };
    expect(await cutsAt(100)).toBe(0); // 1%: the long tail of the way there
    expect(await cutsAt(12)).toBeGreaterThan(0); // 8%: the pace itself is over
  });

  it('keeps one in flight per 100 answers a second before any 429, up to 64, however answers slow', async () => {
    // A local service on the machine this process shares: answers slow as more are in flight, yet
    // more in flight is more done. Judged by latency alone (8 ms, a few at 1 ms), it sat at 16.
    const clock = new SimClock();
    const flow = new Flow(clock, 128);
    let i = 0;
    const call = (): Promise<void> => clock.sleep(i++ % 1500 < 30 ? 1 : 8);
    await clock.run(Promise.all(Array.from({ length: 12_000 }, () => flow.run('match', call))), 600_000);
    expect(flow.window).toBe(64);
  });

  it('never sends more at once than --concurrency allows', async () => {
    const clock = new SimClock();
    const flow = new Flow(clock, 3);
    let inFlight = 0;
    let peak = 0;
    const call = async (): Promise<void> => {
      peak = Math.max(peak, ++inFlight);
      await clock.sleep(5);
      inFlight--;
    };
    await clock.run(Promise.all(Array.from({ length: 200 }, () => flow.run('match', call))), 60_000);
    expect(peak).toBe(3);
  });
});

describe('against a token-bucket service (simulated time, the real executor)', () => {
  // 5,000 companies: 10,000 calls, 100 s at 100 req/s. Retry-After is whole seconds, rounded up.
  for (const burst of [1, 20, 100]) {
    it(`reaches 0.95 of the ideal time with at most 2% 429s and one pause, bucket of ${burst} at 100 req/s`, async () => {
      const r = await simulate({ rate: 100, burst, latencyMs: 20 }, 5000);
      expect(r.efficiency).toBeGreaterThanOrEqual(0.95);
      expect(r.share429).toBeLessThanOrEqual(0.02);
      expect(r.pauses).toBeLessThanOrEqual(1);
    });
  }

  it('stays at the ceiling when the way there jitters by a millisecond (bucket of 20)', async () => {
    const r = await simulate({ rate: 100, burst: 20, latencyMs: 20, jitterMs: 1 }, 5000);
    expect(r.efficiency).toBeGreaterThanOrEqual(0.95);
    expect(r.share429).toBeLessThanOrEqual(0.02);
  });

  it('saturates a 500 req/s service answering in 200 ms without being told a concurrency', async () => {
    const r = await simulate({ rate: 500, burst: 500, latencyMs: 200 }, 10_000);
    expect(r.efficiency).toBeGreaterThanOrEqual(0.9);
    expect(r.share429).toBeLessThanOrEqual(0.02);
    expect(r.peakInFlight).toBeGreaterThan(80); // the old fixed 16 could not have done it
  });

  it('keeps a busy service (no ceiling, but a queue) busy with few requests in flight', async () => {
    // 2,000 requests a second at most, served one at a time: past a few in flight, more only wait.
    const r = await simulate({ rate: 1e9, burst: 1e9, latencyMs: 2, capacity: 2000 }, 4000);
    const throughput = r.accepted / (r.elapsedMs / 1000);
    expect(throughput).toBeGreaterThanOrEqual(0.95 * 2000);
    expect(r.meanInFlight).toBeLessThan(64); // it would sit at 128 if it never shrank
  });

  it('saturates it too when answer times vary widely (0.4 to 1.6 of the typical), the fastest no guide', async () => {
    const r = await simulate({ rate: 500, burst: 500, latencyMs: 200, spread: 1.2 }, 10_000);
    expect(r.efficiency).toBeGreaterThanOrEqual(0.9);
    expect(r.share429).toBeLessThanOrEqual(0.02);
  });

  it("holds back no run's last stretch: not in slow start, nor in the purchases after a dry pass", async () => {
    for (const seed of [1, 2, 3]) {
      // A terminal's question before a large spend: a dry pass over a few new domains (4,000 were
      // matched before), then the purchases. Held in the dry pass's last stretch, 4,200 enriches at
      // 200 req/s took 32 s, the pace stuck at 130.
      const { purchaseMs } = await simulatePasses({ rate: 200, burst: 20, latencyMs: 50, seed }, 4200, { dryFirstMs: 5000, known: 4000 });
      expect(purchaseMs).toBeLessThanOrEqual(1.1 * (4200 / 200) * 1000);
      // A short run whose last stretch came in slow start (the pace no estimate yet): 3.1 s held, 2.5 s not.
      const short = await simulate({ rate: 200, burst: 20, latencyMs: 50, seed }, 100);
      expect(short.elapsedMs).toBeLessThanOrEqual(2_750);
    }
  });

  it('never has more in flight than --concurrency allows', async () => {
    const r = await simulate({ rate: 500, burst: 500, latencyMs: 200 }, 1000, 24);
    expect(r.peakInFlight).toBeLessThanOrEqual(24);
  });

  it('finds a low ceiling quickly', async () => {
    const r = await simulate({ rate: 10, burst: 10, latencyMs: 50 }, 300);
    expect(r.efficiency).toBeGreaterThanOrEqual(0.9);
  });
});

/**
 * What real services do (issue 23), on the same simulated time: answers whose time varies
 * (uniform, and long-tailed), a way there that jitters (a one-token bucket refuses a request that
 * arrives even slightly early, and any delay of one brings the next one early), a bucket on a
 * whole-millisecond clock, and a gateway counting per fixed window. Nothing here depends on how
 * fast the machine is: the clock is simulated and the randomness seeded. Each case runs on two
 * seeds, since one run's figure moves by a few hundredths (a 429 in a run's last second is retried
 * a second later, and that second is counted).
 */
describe('against what real services do (simulated time, the real executor)', () => {
  const SEEDS = [1, 2];
  const UNIFORM: LatencySpec = { kind: 'uniform', minMs: 100, maxMs: 300 };
  const LONG_TAIL: LatencySpec = { kind: 'lognormal', medianMs: 150, sigma: 0.6, maxMs: 2000 };
  const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length;
  /**
   * A client told the ceiling (the bench's baseline-paced.mjs) on the same service model: every
   * request a fixed interval after the last. Its best interval is what jitter allows at all; it
   * depends on the service, not the seed, so the first seed's best serves the others.
   */
  const toldTheCeiling = async (server: SimServerOptions, domains: number, intervals: readonly number[]): Promise<{ result: SimResult; ms: number }> => {
    const runs = await Promise.all(intervals.map(async (ms) => ({ result: await simulatePaced(server, domains, ms), ms })));
    return runs.reduce((best, r) => (r.result.ofCeiling > best.result.ofCeiling ? r : best));
  };
  /** Enrich over the told client's best, and enrich's share of 429s, on each seed. */
  const besideTold = async (server: SimServerOptions): Promise<{ ratios: number[]; shares: number[] }> => {
    const [first, ...others] = SEEDS as [number, ...number[]];
    const best = await toldTheCeiling({ ...server, seed: first }, 2500, [10.1, 10.25, 10.5, 10.75, 11, 11.5]);
    const runs = await Promise.all(
      [first, ...others].map(async (seed) => {
        const told = seed === first ? best : await toldTheCeiling({ ...server, seed }, 2500, [best.ms]);
        const r = await simulate({ ...server, seed }, 2500);
        return { ratio: r.ofCeiling / told.result.ofCeiling, share: r.share429 };
      }),
    );
    return { ratios: runs.map((r) => r.ratio), shares: runs.map((r) => r.share) };
  };

  for (const [name, latency] of [
    ['uniform in 100-300 ms', UNIFORM],
    ['long-tailed (lognormal, median 150 ms)', LONG_TAIL],
  ] as const) {
    it(`saturates 500 req/s when answers take ${name}, by default and no worse with a larger --concurrency`, async () => {
      // 6,000 calls, as the bench's latency row: 12 s at the ceiling.
      const runs = (concurrency: number): Promise<SimResult[]> => Promise.all(SEEDS.map((seed) => simulate({ rate: 500, burst: 500, latencyMs: 0, latency, seed }, 3000, concurrency)));
      const byDefault = await runs(128);
      const wider = await runs(256);
      for (const r of [...byDefault, ...wider]) {
        expect(r.ofCeiling).toBeGreaterThanOrEqual(0.93);
        expect(r.share429).toBeLessThanOrEqual(0.02);
      }
      const [d, w] = [mean(byDefault.map((r) => r.ofCeiling)), mean(wider.map((r) => r.ofCeiling))];
      expect(d).toBeGreaterThanOrEqual(0.95);
      expect(w).toBeGreaterThanOrEqual(0.95);
      expect(w).toBeGreaterThanOrEqual(d - 0.03);
    });
  }

  it('ends a run at the ceiling too: a 429 in its last stretch would wait out Retry-After (5 seeds)', async () => {
    // A deep bucket hides how far over it the pace was until it is empty, and its last tokens
    // inflate what was accepted: the pace climbed back over the ceiling, and half the runs had a
    // request refused in their last second and retried a second later, ending at 0.91 to 0.94.
    const runs = await Promise.all(Array.from({ length: 5 }, (_, i) => simulate({ rate: 500, burst: 500, latencyMs: 0, latency: UNIFORM, seed: 100 + i }, 3000)));
    const shares = runs.map((r) => r.ofCeiling).sort((a, b) => a - b);
    expect(shares[0]).toBeGreaterThanOrEqual(0.93);
    expect(shares.filter((s) => s < 0.95).length).toBeLessThanOrEqual(1);
  });

  // Half the matches are companies, and a few answers take over a second.
  it('ends a run at the ceiling in its end game, half the matches companies (5 seeds)', async () => {
    // A match answered late among the last second's matches had no enrich work left behind it:
    // its enrich went after every other request (the bench's mix: 4,000 domains, half companies).
    const runs = await Promise.all(Array.from({ length: 5 }, (_, i) => simulatePasses({ rate: 500, burst: 500, latencyMs: 0, latency: LONG_TAIL, seed: 200 + i }, 4000, { missEvery: 2 })));
    const shares = runs.map((r) => r.result.ofCeiling).sort((a, b) => a - b);
    expect(shares[0]).toBeGreaterThanOrEqual(0.95);
    expect(shares[2]).toBeGreaterThanOrEqual(0.98);
  });

  for (const [name, server] of [
    ['whose way there jitters uniformly by up to 1 ms', { rate: 100, burst: 1, latencyMs: 20, way: { kind: 'uniform', minMs: 0, maxMs: 1 } }],
    ['whose way there jitters with a long tail', { rate: 100, burst: 1, latencyMs: 20, way: WAY }],
    ['answering in about a millisecond (the bench\'s local sandbox), the way there long-tailed', { rate: 100, burst: 1, latencyMs: 1, way: WAY }],
    ['counting whole milliseconds', { rate: 100, burst: 1, latencyMs: 20, way: WAY, tickMs: 1 }],
  ] as const) {
    it(`gets within 0.95 of a client told the ceiling at a one-token bucket ${name}, at most 5% 429s`, async () => {
      const { ratios, shares } = await besideTold(server);
      expect(mean(ratios)).toBeGreaterThanOrEqual(0.95);
      for (const ratio of ratios) expect(ratio).toBeGreaterThanOrEqual(0.93);
      for (const share of shares) expect(share).toBeLessThanOrEqual(0.05);
    });
  }

  it('gets within 0.95 of a client told the ceiling at a gateway counting per fixed second', async () => {
    // Past the window's count every request is refused until the boundary, however evenly paced:
    // dense refusals that must not cut the pace far below what the gateway lets through.
    const { ratios, shares } = await besideTold({ rate: 100, burst: 1, latencyMs: 20, way: WAY, windowMs: 1000 });
    expect(mean(ratios)).toBeGreaterThanOrEqual(0.95);
    for (const ratio of ratios) expect(ratio).toBeGreaterThanOrEqual(0.93);
    for (const share of shares) expect(share).toBeLessThanOrEqual(0.05);
  });
});

describe('two machines on one key (simulated time, the real executor)', () => {
  // Each learns the key apart: the one left when the other stops finds the ceiling again (told by the store, or after a quiet stretch), and one
  // joining a key the other keeps empty is not left at the share it first got.
  // Seeds where the one left, waiting for a quiet stretch instead, reached only 0.91-0.94.
  for (const [staggerMs, seeds] of [[0, [3, 6]], [10_000, [1, 4]]] as const) {
    it(`reach 0.95 of its ceiling together with at most 5% 429s, the second starting ${staggerMs / 1000} s later`, async () => {
      // The one left probes as soon as the store shows the other's run ended.
      for (const seed of seeds) {
        const r = await simulateMachines({ rate: 100, burst: 20, latencyMs: 2, seed, way: WAY }, 2000, 2, staggerMs);
        expect(r.ofCeiling, `seed ${seed}`).toBeGreaterThanOrEqual(0.95);
        expect(r.share429, `seed ${seed}`).toBeLessThanOrEqual(0.05);
      }
    });
  }
});

describe("asking the store for the other runs (simulated time, the real executor)", () => {
  it('asks on progress, at most once a second a run, and never after the run ended', async () => {
    const r = await simulateMachines({ rate: 100, burst: 20, latencyMs: 2, seed: 3, way: WAY }, 2000, 2, 3_000);
    for (const [run, endedAt] of r.ended) {
      const at = r.asks.filter((a) => a.run === run).map((a) => a.at);
      const gaps = at.slice(1).map((t, i) => t - (at[i] as number));
      expect(Math.min(...gaps), `run ${run}`).toBeGreaterThanOrEqual(PEER_POLL_MS);
      expect(at.every((t) => t <= endedAt)).toBe(true);
      // Paced from its first seconds: about one ask a second of its run.
      expect(at.length, `run ${run}`).toBeGreaterThanOrEqual(Math.floor(((endedAt - (at[0] as number)) / PEER_POLL_MS) * 0.8));
    }
  });
});

describe('a probe of a quiet stretch costs a lone machine nothing (simulated time, the real executor)', () => {
  it("drops news of another run's end that a refusal follows (here slow start's: a probe later would only add 429s)", async () => {
    const server: SimServerOptions = { rate: 100, burst: 20, latencyMs: 20, seed: 1 };
    const told = await simulate(server, 3000, 128, (flow, clock) => void clock.sleep(1000).then(() => flow.peerLeft()));
    expect(told).toStrictEqual(await simulate(server, 3000));
  });

  it('counts only time held to the pace: the purchase after a dry pass and a pause keeps its pace', async () => {
    // A probe that counted the person's answer as quiet started at once and doubled from what the empty second before had accepted.
    const { purchaseMs } = await simulatePasses({ rate: 100, burst: 20, latencyMs: 20, seed: 1 }, 3000, { dryFirstMs: 5000 });
    expect(purchaseMs).toBeLessThanOrEqual(30_500);
  });

  it('never probes a gateway whose Retry-After runs past a second (a window of 2 s)', async () => {
    // Its count fits in less than a second at a probe's pace, and every refusal waits out the rest of the window.
    const r = await simulate({ rate: 50, burst: 1, latencyMs: 20, windowMs: 2000, seed: 1 }, 3000);
    expect(r.ofCeiling).toBeGreaterThanOrEqual(0.95);
    expect(r.share429).toBeLessThanOrEqual(0.02);
  });
});
