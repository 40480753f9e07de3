import { describe, expect, it } from 'vitest';
import { AdaptiveLimiter } from '../../src/pipeline/limiter.js';
import { Scheduler } from '../../src/pipeline/scheduler.js';
import { SimClock, simulate } from '../helpers/sim.js';

describe('AdaptiveLimiter', () => {
  it('holds every caller for one shared pause, then releases them one interval apart', async () => {
    const clock = new SimClock();
    const limiter = new AdaptiveLimiter({ clock, initialRate: 10 });
    await clock.run(limiter.acquire(), 1000);
    limiter.onRateLimited(0, 2); // everyone waits until t = 2000 ms
    const released: number[] = [];
    const callers = Array.from({ length: 5 }, () => limiter.acquire().then(() => released.push(clock.now())));
    await clock.run(Promise.all(callers), 60_000);
    expect(released[0]).toBeGreaterThanOrEqual(2000);
    const gaps = released.slice(1).map((t, i) => t - (released[i] as number));
    const interval = 1000 / limiter.rate;
    for (const gap of gaps) expect(gap).toBeCloseTo(interval, 0);
  });

  it('decreases once per burst of 429s, not once per 429', () => {
    const clock = new SimClock();
    const limiter = new AdaptiveLimiter({ clock, initialRate: 100 });
    limiter.onRateLimited(0, 1);
    const after = limiter.rate;
    for (let i = 0; i < 10; i++) limiter.onRateLimited(0, 1); // answers to requests sent before the decrease
    expect(limiter.rate).toBe(after);
    expect(after).toBeCloseTo(90, 5);
  });

  it('does not hold the process open through a long pause once every caller has given up', async () => {
    const { systemClock } = await import('../../src/pipeline/clock.js');
    const timers = (): number => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
    const before = timers();
    const limiter = new AdaptiveLimiter({ clock: systemClock, initialRate: 10 });
    limiter.onRateLimited(systemClock.now() - 1, 30); // a 30 s pause
    const quit = new AbortController();
    const waiting = limiter.acquire(quit.signal);
    await new Promise((r) => setImmediate(r));
    expect(timers()).toBeGreaterThan(before);
    quit.abort(new Error('interrupted'));
    await expect(waiting).rejects.toThrow('interrupted');
    await new Promise((r) => setImmediate(r));
    expect(timers()).toBe(before);
  });

  it('lets a caller that gives up leave the queue', async () => {
    const clock = new SimClock();
    const limiter = new AdaptiveLimiter({ clock, initialRate: 1 });
    await clock.run(limiter.acquire(), 1000);
    const quit = new AbortController();
    const gone = limiter.acquire(quit.signal);
    quit.abort(new Error('stop'));
    await expect(gone).rejects.toThrow('stop');
    expect(limiter.queued).toBe(0);
  });
});

describe('Scheduler', () => {
  it('runs paid enriches before free matches that were queued earlier', async () => {
    const clock = new SimClock();
    const scheduler = new Scheduler(new AdaptiveLimiter({ clock }), clock, 1);
    const order: string[] = [];
    const job = (name: string) => async () => {
      order.push(name);
      await clock.sleep(10);
    };
    const first = scheduler.run('match', job('m1'));
    await new Promise((r) => setImmediate(r)); // m1 takes the only slot
    const all = [
      first,
      scheduler.run('match', job('m2')),
      scheduler.run('match', job('m3')),
      scheduler.run('enrich', job('e1')),
      scheduler.run('enrich', job('e2')),
    ];
    await clock.run(Promise.all(all), 10_000);
    expect(order).toStrictEqual(['m1', 'e1', 'e2', 'm2', 'm3']);
  });
});

describe('against a token-bucket service (simulated time, the real executor)', () => {
  it('runs at the ceiling with few 429s when the bucket holds a second of requests', async () => {
    const r = await simulate({ rate: 100, burst: 100, latencyMs: 20 }, 3000);
    expect(r.efficiency).toBeGreaterThanOrEqual(0.95);
    expect(r.share429).toBeLessThanOrEqual(0.02);
  });

  it('finds a low ceiling quickly', async () => {
    const r = await simulate({ rate: 10, burst: 10, latencyMs: 50 }, 300);
    expect(r.efficiency).toBeGreaterThanOrEqual(0.9);
  });

  it('keeps 429s rare and throughput high even with a one-token bucket, where every pause is lost', async () => {
    const r = await simulate({ rate: 100, burst: 1, latencyMs: 20 }, 10_000);
    expect(r.efficiency).toBeGreaterThanOrEqual(0.9);
    expect(r.share429).toBeLessThanOrEqual(0.01);
  });
});
