import { describe, expect, it } from 'vitest';
import { describeLatency, latencySampler, parseLatency } from '../../src/sandbox/latency.js';
import { mulberry32 } from '../../src/sandbox/random.js';
import { FixedWindow, TokenBucket } from '../../src/sandbox/token-bucket.js';
import { parseCommandLine } from '../../src/cli/program.js';

const draws = (spec: Parameters<typeof latencySampler>[0], n: number, seed = 7): number[] => {
  const sample = latencySampler(spec, mulberry32(seed));
  return Array.from({ length: n }, () => sample());
};
const quantile = (xs: number[], q: number): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length * q)] as number;

describe('sandbox latency distributions', () => {
  it('parses fixed, uniform and lognormal, and refuses anything else', () => {
    expect(parseLatency('200')).toStrictEqual({ kind: 'fixed', ms: 200 });
    expect(parseLatency('100-300')).toStrictEqual({ kind: 'uniform', minMs: 100, maxMs: 300 });
    expect(parseLatency('lognormal:20')).toStrictEqual({ kind: 'lognormal', medianMs: 20, sigma: 1, maxMs: 60_000 });
    expect(parseLatency('lognormal:20:0.5:400')).toStrictEqual({ kind: 'lognormal', medianMs: 20, sigma: 0.5, maxMs: 400 });
    for (const bad of ['', '-5', '300-100', 'abc', '70000', 'lognormal:', 'lognormal:0', 'lognormal:20:9', 'normal:20']) expect(parseLatency(bad)).toBeUndefined();
    expect(describeLatency({ kind: 'uniform', minMs: 100, maxMs: 300 })).toBe('latency 100-300 ms (uniform)');
  });

  it('draws a fixed time always, and a uniform one spread evenly between its bounds', () => {
    expect(new Set(draws({ kind: 'fixed', ms: 200 }, 100))).toStrictEqual(new Set([200]));
    const u = draws({ kind: 'uniform', minMs: 100, maxMs: 300 }, 10_000);
    expect(Math.min(...u)).toBeGreaterThanOrEqual(100);
    expect(Math.max(...u)).toBeLessThan(300);
    expect(quantile(u, 0.25)).toBeCloseTo(150, -1);
    expect(quantile(u, 0.75)).toBeCloseTo(250, -1);
  });

  it('draws a long tail: most answers near the median, a few far slower, none past the cap', () => {
    const t = draws({ kind: 'lognormal', medianMs: 20, sigma: 1, maxMs: 1000 }, 20_000);
    expect(quantile(t, 0.5)).toBeGreaterThan(18);
    expect(quantile(t, 0.5)).toBeLessThan(22);
    expect(quantile(t, 0.99)).toBeGreaterThan(150); // e^2.33 = 10x the median
    expect(Math.max(...t)).toBeLessThanOrEqual(1000);
    expect(Math.min(...t)).toBeGreaterThan(0);
  });

  it('replays exactly from the same seed', () => {
    const spec = { kind: 'lognormal', medianMs: 20, sigma: 1, maxMs: 60_000 } as const;
    expect(draws(spec, 50, 3)).toStrictEqual(draws(spec, 50, 3));
    expect(draws(spec, 50, 3)).not.toStrictEqual(draws(spec, 50, 4));
  });
});

describe('a token bucket on a coarse clock', () => {
  it('sees only whole ticks: a request just before a tick is refused, one on it accepted', () => {
    // One token at 100 a second: one every 10 ms.
    const exact = new TokenBucket(100, 1, 0);
    const coarse = new TokenBucket(100, 1, 0, 1);
    for (const b of [exact, coarse]) expect(b.take(0.3).ok).toBe(true);
    // 10.2 ms after 0.3 is enough for an exact clock (9.9 ms of refill is not; 10.2 is)...
    expect(exact.take(10.5).ok).toBe(true);
    // ...but the coarse one saw the first at 0 and this one at 10: exactly one token, also fine;
    expect(coarse.take(10.5).ok).toBe(true);
    // while 19.9 looks like 19 to it, 9 ms after 10: refused, though 9.4 ms really passed.
    expect(coarse.take(19.9).ok).toBe(false);
    expect(exact.take(19.9).ok).toBe(false);
    expect(coarse.take(20).ok).toBe(true);
  });

  it('with a coarser tick, counts every request within a tick as at the same instant', () => {
    const b = new TokenBucket(100, 1, 0, 50);
    expect(b.take(0).ok).toBe(true);
    expect(b.take(49).ok).toBe(false); // 49 ms later, but still tick 0: nothing refilled
    const r = b.take(50);
    expect(r.ok).toBe(true);
    expect(b.take(60)).toStrictEqual({ ok: false, retryAfterSeconds: 1 });
  });
});

describe('a fixed-window gateway', () => {
  it('lets N through per window, starts again on the boundary, and says the seconds to it', () => {
    const w = new FixedWindow(3, 1000);
    expect([0, 1, 2].map((t) => w.take(900 + t).ok)).toStrictEqual([true, true, true]);
    expect(w.take(999)).toStrictEqual({ ok: false, retryAfterSeconds: 1 });
    // The boundary: a new count, so 6 got through within 101 ms (twice N around a boundary).
    expect([0, 1, 2].map((t) => w.take(1000 + t).ok)).toStrictEqual([true, true, true]);
    expect(w.take(1001).ok).toBe(false);
    expect(w.take(2000).ok).toBe(true);
  });

  it('rounds Retry-After up to whole seconds to the boundary of a long window', () => {
    const w = new FixedWindow(1, 10_000);
    expect(w.take(500).ok).toBe(true);
    expect(w.take(1500)).toStrictEqual({ ok: false, retryAfterSeconds: 9 });
  });
});

describe('enrich sandbox flags', () => {
  const sandbox = (args: string[]): Record<string, unknown> => {
    const parsed = parseCommandLine(['sandbox', ...args], { writeOut: () => {}, writeErr: () => {} }, {});
    if (parsed.kind !== 'sandbox') throw new Error(`parsed as ${parsed.kind}`);
    return parsed.options as unknown as Record<string, unknown>;
  };

  it('keeps --latency <ms> and takes ranges, a long tail, a clock tick and a fixed window', () => {
    expect(sandbox(['--latency', '50'])['latency']).toStrictEqual({ kind: 'fixed', ms: 50 });
    expect(sandbox([])['latency']).toStrictEqual({ kind: 'fixed', ms: 0 });
    expect(sandbox(['--latency', '100-300'])['latency']).toStrictEqual({ kind: 'uniform', minMs: 100, maxMs: 300 });
    const o = sandbox(['--rate-limit', '100', '--burst', '1', '--clock-tick', '1', '--fixed-window', '1000']);
    expect(o).toMatchObject({ rateLimit: 100, burst: 1, clockTickMs: 1, fixedWindowMs: 1000 });
  });

  it('refuses a latency it cannot read', () => {
    expect(parseCommandLine(['sandbox', '--latency', 'fast'], { writeOut: () => {}, writeErr: () => {} }, {}).kind).toBe('exit');
  });
});
