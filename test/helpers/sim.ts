import type { RateLimitedError} from '../../src/api/errors.js';
import { apiErrorFromResponse } from '../../src/api/errors.js';
import type { ServiceClient } from '../../src/api/client.js';
import { DEFAULT_RETRY_POLICY } from '../../src/api/retry.js';
import { memoryStore } from './memory-store.js';
import type { Clock } from '../../src/pipeline/clock.js';
import { execute } from '../../src/pipeline/execute.js';
import { AdaptiveLimiter } from '../../src/pipeline/limiter.js';
import { Progress } from '../../src/pipeline/progress.js';
import { Scheduler } from '../../src/pipeline/scheduler.js';
import { RunState } from '../../src/pipeline/state.js';
import { mulberry32 } from '../../src/sandbox/random.js';
import { TokenBucket } from '../../src/sandbox/token-bucket.js';

interface Timer {
  at: number;
  seq: number;
  fire: () => void;
}

/** Simulated time: sleeps resolve only when the simulation advances past them. */
export class SimClock implements Clock {
  private t = 0;
  private seq = 0;
  private timers: Timer[] = [];

  now(): number {
    return this.t;
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted === true) {
        reject(signal.reason);
        return;
      }
      const timer: Timer = { at: this.t + Math.max(0, ms), seq: this.seq++, fire: resolve };
      this.push(timer);
      signal?.addEventListener(
        'abort',
        () => {
          // Cancelled timers stay in the heap and fire into a settled promise: harmless.
          timer.fire = () => {};
          reject(signal.reason);
        },
        { once: true },
      );
    });
  }

  until(deadline: number, signal?: AbortSignal): Promise<void> {
    return this.sleep(deadline - this.t, signal);
  }

  private less(a: Timer, b: Timer): boolean {
    return a.at < b.at || (a.at === b.at && a.seq < b.seq);
  }

  private push(timer: Timer): void {
    const h = this.timers;
    h.push(timer);
    for (let i = h.length - 1; i > 0; ) {
      const p = (i - 1) >> 1;
      if (!this.less(h[i] as Timer, h[p] as Timer)) break;
      [h[i], h[p]] = [h[p] as Timer, h[i] as Timer];
      i = p;
    }
  }

  private pop(): Timer {
    const h = this.timers;
    const top = h[0] as Timer;
    const last = h.pop() as Timer;
    if (h.length > 0) {
      h[0] = last;
      for (let i = 0; ; ) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < h.length && this.less(h[l] as Timer, h[m] as Timer)) m = l;
        if (r < h.length && this.less(h[r] as Timer, h[m] as Timer)) m = r;
        if (m === i) break;
        [h[i], h[m]] = [h[m] as Timer, h[i] as Timer];
        i = m;
      }
    }
    return top;
  }

  /** Runs until `done` settles: let every promise chain move, then jump to the next timer. */
  async run<T>(done: Promise<T>, maxMs: number): Promise<T> {
    let settled = false;
    let value: T | undefined;
    let failure: unknown;
    done.then(
      (v) => {
        settled = true;
        value = v;
      },
      (e: unknown) => {
        settled = true;
        failure = e;
      },
    );
    for (;;) {
      await new Promise<void>((r) => setImmediate(r));
      if (settled) break;
      if (this.timers.length === 0) throw new Error(`simulation stalled at ${this.t} ms`);
      const timer = this.pop();
      if (timer.at > maxMs) throw new Error(`simulation ran past ${maxMs} ms`);
      this.t = Math.max(this.t, timer.at);
      timer.fire();
    }
    if (failure !== undefined) throw failure;
    return value as T;
  }
}

export interface SimServerOptions {
  /** The service's ceiling, requests a second, and its bucket depth. */
  rate: number;
  burst: number;
  /** Answer time, ms, drawn uniformly from latency x [1 - spread/2, 1 + spread/2] (spread default 1). */
  latencyMs: number;
  spread?: number;
  /** The way there, ms, drawn uniformly from [0, jitter]: when the bucket sees the request. */
  jitterMs?: number;
  /**
   * Requests a second the service can do at all, one at a time (a busy server): past it, requests
   * queue, first come first served, and their latency grows with the queue. Default: no limit.
   */
  capacity?: number;
  seed?: number;
}

export interface SimResult {
  elapsedMs: number;
  accepted: number;
  rateLimited: number;
  /** Accepted requests a second, over the ceiling. */
  efficiency: number;
  share429: number;
  /** Times the limiter held every caller for a Retry-After. */
  pauses: number;
  /** The most requests in flight at once, and the average over the run. */
  peakInFlight: number;
  meanInFlight: number;
}

/**
 * The real executor, scheduler and limiter against a token-bucket model of the service, on
 * simulated time: `domains` matches that all hit, then as many enriches.
 */
export async function simulate(server: SimServerOptions, domains: number, concurrency = 128): Promise<SimResult> {
  const clock = new SimClock();
  const bucket = new TokenBucket(server.rate, server.burst, 0);
  const random = mulberry32(server.seed ?? 1);
  let accepted = 0;
  let rateLimited = 0;

  let inFlight = 0;
  let peakInFlight = 0;
  let inFlightArea = 0;
  let lastChange = 0;
  const count = (delta: number): void => {
    inFlightArea += inFlight * (clock.now() - lastChange);
    lastChange = clock.now();
    inFlight += delta;
    peakInFlight = Math.max(peakInFlight, inFlight);
  };
  const answer = async <T>(value: T): Promise<T> => {
    count(1);
    try {
      return await respond(value);
    } finally {
      count(-1);
    }
  };
  let busyUntil = 0;
  const respond = async <T>(value: T): Promise<T> => {
    const jitter = server.jitterMs ?? 0;
    if (jitter > 0) await clock.sleep(jitter * random());
    const taken = bucket.take(clock.now());
    if (!taken.ok) {
      rateLimited++;
      await clock.sleep(1);
      throw apiErrorFromResponse({
        status: 429,
        contentType: 'application/problem+json',
        retryAfter: String(taken.retryAfterSeconds),
        requestId: undefined,
        body: JSON.stringify({ code: 'rate_limited', status: 429, retryAfterSeconds: taken.retryAfterSeconds }),
      }) as RateLimitedError;
    }
    accepted++;
    const spread = server.spread ?? 1;
    let wait = server.latencyMs * (1 - spread / 2 + spread * random());
    if (server.capacity !== undefined) {
      busyUntil = Math.max(clock.now(), busyUntil) + 1000 / server.capacity;
      wait += busyUntil - clock.now();
    }
    await clock.sleep(wait);
    return value;
  };
  const client: ServiceClient = {
    match: (domain) => answer({ matched: true, credits_charged: 0, company: { domain, name: domain } }),
    enrich: (domain) =>
      answer({
        matched: true,
        credits_charged: 1,
        credits_remaining: 1e9,
        company: { domain, name: domain, website_url: null, description: null, industry: null, employee_count: null, revenue_range: null, ownership_type: null, year_founded: null, specialties: [], hq_country: null, hq_city: null, last_updated: '' },
      }),
  };

  const state = new RunState();
  for (let i = 0; i < domains; i++) state.addDomain(`company-${i}.com`);
  const limiter = new AdaptiveLimiter({ clock });
  const progress = new Progress();
  const stop = await clock.run(
    execute(
      state,
      { dryRun: false, maxCredits: null, retry: DEFAULT_RETRY_POLICY, matchWindow: Math.max(32, concurrency * 4), graceMs: 1000 },
      { client, scheduler: new Scheduler(limiter, clock, concurrency), store: memoryStore(), clock, random, idempotencyKey: (c, v) => `${c.domain}-${v}`, planCompany: () => {}, progress: progress.sink },
      new AbortController().signal,
    ),
    3_600_000,
  );
  if (stop !== null) throw new Error(`simulation stopped: ${stop.reason}`);
  if (progress.enrichDone !== domains) throw new Error(`only ${progress.enrichDone} of ${domains} enriched`);
  const elapsedMs = clock.now();
  return {
    elapsedMs,
    accepted,
    rateLimited,
    efficiency: accepted / (elapsedMs / 1000) / server.rate,
    share429: rateLimited / (accepted + rateLimited),
    pauses: limiter.pauses,
    peakInFlight,
    meanInFlight: inFlightArea / elapsedMs,
  };
}
