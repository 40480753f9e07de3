import type { RateLimitedError} from '../../src/api/errors.js';
import { apiErrorFromResponse } from '../../src/api/errors.js';
import type { ServiceClient } from '../../src/api/client.js';
import { DEFAULT_RETRY_POLICY } from '../../src/api/retry.js';
import { MemoryStore, memoryStore } from './memory-store.js';
import type { Clock } from '../../src/pipeline/clock.js';
import { execute } from '../../src/pipeline/execute.js';
import { Progress } from '../../src/pipeline/progress.js';
import { Flow } from '../../src/pipeline/flow.js';
import { RunState } from '../../src/pipeline/state.js';
import { mulberry32 } from '../../src/sandbox/random.js';
import { rateGate } from '../../src/sandbox/accounts.js';
import { latencySampler, type LatencySpec } from '../../src/sandbox/latency.js';
import type { RateGate } from '../../src/sandbox/token-bucket.js';

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
      const abort = (): void => {
        // Cancelled timers stay in the heap and fire into a settled promise: harmless.
        timer.fire = () => {};
        reject(signal?.reason);
      };
      // A timer that fires lets go of the signal, as node:timers/promises does: a long-lived signal gathers no listeners.
      const timer: Timer = { at: this.t + Math.max(0, ms), seq: this.seq++, fire: () => (signal?.removeEventListener('abort', abort), resolve()) };
      this.push(timer);
      signal?.addEventListener('abort', abort, { once: true });
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
  /** Answer time drawn from this distribution instead (latencyMs and spread then unused). */
  latency?: LatencySpec;
  /** The way there, ms, drawn uniformly from [0, jitter]: when the bucket sees the request. */
  jitterMs?: number;
  /** The way there drawn from this distribution instead (a long tail: most requests on time, a few late). */
  way?: LatencySpec;
  /** The bucket's clock tick, ms (the sandbox's --clock-tick). */
  tickMs?: number;
  /** A gateway counting `rate` x window per fixed window of this many ms, instead of a bucket. */
  windowMs?: number;
  /**
   * Requests a second the service can do at all, one at a time (a busy server): past it, requests
   * queue, first come first served, and their latency grows with the queue. Default: no limit.
   */
  capacity?: number;
  /** From `atMs` on, the ceiling is `rate` (a bucket as deep as before): a plan changed mid-run. */
  falls?: { atMs: number; rate: number };
  seed?: number;
}

export interface SimResult {
  elapsedMs: number;
  accepted: number;
  rateLimited: number;
  /** Accepted requests a second, over the ceiling. */
  efficiency: number;
  /**
   * The same from the service's first request to its last, as the bench measures a sandbox: what
   * a client gets out of the ceiling, without the last answer's time (which no client can shorten).
   */
  ofCeiling: number;
  share429: number;
  /** Times the flow held every caller for a Retry-After. */
  pauses: number;
  /** The most requests in flight at once, and the average over the run. */
  peakInFlight: number;
  meanInFlight: number;
}

/** The service's side of a simulation: its gate, its latency, and what it counted. */
class SimService {
  accepted = 0;
  rateLimited = 0;
  inFlight = 0;
  peakInFlight = 0;
  private inFlightArea = 0;
  private lastChange = 0;
  private busyUntil = 0;
  private firstAt: number | undefined;
  private lastAt = 0;
  private gate: RateGate;
  private fallen = false;
  private readonly latency: () => number;
  private readonly way: () => number;

  constructor(
    private readonly server: SimServerOptions,
    private readonly clock: SimClock,
    random: () => number,
  ) {
    this.gate = rateGate({ rate: server.rate, burst: server.burst, tickMs: server.tickMs, windowMs: server.windowMs }, 0) as RateGate;
    const spread = server.spread ?? 1;
    this.latency = latencySampler(server.latency ?? { kind: 'uniform', minMs: server.latencyMs * (1 - spread / 2), maxMs: server.latencyMs * (1 + spread / 2) }, random);
    this.way = latencySampler(server.way ?? { kind: 'uniform', minMs: 0, maxMs: server.jitterMs ?? 0 }, random);
  }

  get meanInFlight(): number {
    return this.inFlightArea / Math.max(1, this.clock.now());
  }

  private count(delta: number): void {
    this.inFlightArea += this.inFlight * (this.clock.now() - this.lastChange);
    this.lastChange = this.clock.now();
    this.inFlight += delta;
    this.peakInFlight = Math.max(this.peakInFlight, this.inFlight);
  }

  /** One request: the way there, the gate (a 429 as the client's error), then the answer's time. */
  async answer<T>(value: T): Promise<T> {
    this.count(1);
    try {
      return await this.respond(value);
    } finally {
      this.count(-1);
    }
  }

  private async respond<T>(value: T): Promise<T> {
    const way = this.way();
    if (way > 0) await this.clock.sleep(way);
    this.firstAt ??= this.clock.now();
    this.lastAt = this.clock.now();
    const falls = this.server.falls;
    if (falls !== undefined && !this.fallen && this.clock.now() >= falls.atMs) {
      this.fallen = true;
      this.gate = rateGate({ rate: falls.rate, burst: this.server.burst, tickMs: this.server.tickMs, windowMs: this.server.windowMs }, this.clock.now()) as RateGate;
    }
    const taken = this.gate.take(this.clock.now());
    if (!taken.ok) {
      this.rateLimited++;
      await this.clock.sleep(1);
      throw apiErrorFromResponse({
        status: 429,
        contentType: 'application/problem+json',
        retryAfter: String(taken.retryAfterSeconds),
        requestId: undefined,
        body: JSON.stringify({ code: 'rate_limited', status: 429, retryAfterSeconds: taken.retryAfterSeconds }),
      }) as RateLimitedError;
    }
    this.accepted++;
    let wait = this.latency();
    if (this.server.capacity !== undefined) {
      this.busyUntil = Math.max(this.clock.now(), this.busyUntil) + 1000 / this.server.capacity;
      wait += this.busyUntil - this.clock.now();
    }
    await this.clock.sleep(wait);
    return value;
  }

  result(elapsedMs: number, pauses: number): SimResult {
    return {
      elapsedMs,
      accepted: this.accepted,
      rateLimited: this.rateLimited,
      efficiency: this.accepted / (elapsedMs / 1000) / this.server.rate,
      ofCeiling: this.accepted / ((this.lastAt - (this.firstAt ?? 0)) / 1000) / this.server.rate,
      share429: this.rateLimited / (this.accepted + this.rateLimited),
      pauses,
      peakInFlight: this.peakInFlight,
      meanInFlight: this.meanInFlight,
    };
  }
}

/** The service's two endpoints on the model: every `missEvery`-th domain (by its first number) is no company; 0: none. */
function simClient(service: SimService, missEvery: number): ServiceClient {
  const missed = (domain: string): boolean => missEvery > 0 && Number(/\d+/.exec(domain)?.[0]) % missEvery === 0;
  return {
    match: (domain) => service.answer(missed(domain) ? { matched: false, credits_charged: 0, company: null } : { matched: true, credits_charged: 0, company: { domain, name: domain } }),
    enrich: (domain) => service.answer(simCompany(domain)),
  };
}

const simCompany = (domain: string) => ({
  matched: true as const,
  credits_charged: 1,
  credits_remaining: 1e9,
  company: { domain, name: domain, website_url: null, description: null, industry: null, employee_count: null, revenue_range: null, ownership_type: null, year_founded: null, specialties: [], hq_country: null, hq_city: null, last_updated: '' },
});

/**
 * The real executor and flow against a model of the service (a token bucket or a
 * fixed window), on simulated time: `domains` matches that all hit, then as many enriches.
 */
export async function simulate(server: SimServerOptions, domains: number, concurrency = 128, observe?: (flow: Flow, clock: SimClock) => void): Promise<SimResult> {
  return (await simulatePasses(server, domains, { concurrency, ...(observe === undefined ? {} : { observe }) })).result;
}

export interface Passes {
  concurrency?: number;
  observe?: (flow: Flow, clock: SimClock) => void;
  /**
   * A dry pass first (matches only), then this long before the purchase pass, as a person at a
   * terminal answering the question before a large spend (commands/run.ts): one flow
   * for both, as the CLI has.
   */
  dryFirstMs?: number;
  /** Domains an earlier run matched already: only bought. */
  known?: number;
  /** Every `missEvery`-th domain is no company (the match misses, nothing to buy); default none. */
  missEvery?: number;
}

/** simulate, with a dry pass first if asked: the result, and how long the purchase pass took. */
export async function simulatePasses(server: SimServerOptions, domains: number, passes: Passes = {}): Promise<{ result: SimResult; purchaseMs: number }> {
  const concurrency = passes.concurrency ?? 128;
  const missEvery = passes.missEvery ?? 0;
  const clock = new SimClock();
  const random = mulberry32(server.seed ?? 1);
  const service = new SimService(server, clock, random);
  const client = simClient(service, missEvery);

  const state = new RunState();
  for (let i = 0; i < domains; i++) {
    const d = state.addDomain(`company-${i}.com`);
    if (i < (passes.known ?? 0)) state.loadDomain(d, { action: 'hit', company: `company-${i}.com`, name: `company-${i}.com` });
  }
  const flow = new Flow(clock, concurrency);
  passes.observe?.(flow, clock);
  const progress = new Progress();
  const pass = async (dryRun: boolean): Promise<void> => {
    const stop = await clock.run(
      execute(
        state,
        { dryRun, maxCredits: null, retry: DEFAULT_RETRY_POLICY, matchesQueued: concurrency + 32, graceMs: 1000 },
        { client, flow, store: memoryStore(), clock, random, idempotencyKey: (c, v) => `${c.domain}-${v}`, planCompany: () => {}, progress: progress.sink },
        new AbortController().signal,
      ),
      3_600_000,
    );
    if (stop !== null) throw new Error(`simulation stopped: ${stop.reason}`);
  };
  if (passes.dryFirstMs !== undefined) {
    await pass(true);
    await clock.run(clock.sleep(passes.dryFirstMs), 3_600_000);
  }
  const purchaseFrom = clock.now();
  await pass(false);
  const companies = missEvery > 0 ? domains - Math.ceil(domains / missEvery) : domains;
  if (progress.enrichDone !== companies) throw new Error(`only ${progress.enrichDone} of ${companies} enriched`);
  return { result: service.result(clock.now(), flow.pauses), purchaseMs: clock.now() - purchaseFrom };
}

/**
 * `machines` runs at once, each with a flow of its own (two machines of a team on one key),
 * against one service: `domains` matches each, every other one a company, the later machines
 * starting `staggerMs` after the one before. What the service saw, together.
 */
export async function simulateMachines(
  server: SimServerOptions,
  domains: number,
  machines = 2,
  staggerMs = 0,
  observe?: (flow: Flow, clock: SimClock, machine: number) => void,
): Promise<SimResult & { asks: MemoryStore['asks']; ended: Map<number, number> }> {
  const clock = new SimClock();
  const random = mulberry32(server.seed ?? 1);
  const service = new SimService(server, clock, random);
  const client = simClient(service, 2);
  const flows: Flow[] = [];
  // One store the machines share, as a team's do: a machine that ends is gone from its runs.
  const store = new MemoryStore(() => clock.now());
  const machine = async (m: number): Promise<void> => {
    await clock.sleep(m * staggerMs);
    const state = new RunState();
    for (let i = 0; i < domains; i++) state.addDomain(`company-${i}.machine-${m}.com`);
    const flow = new Flow(clock, 128);
    const run = store.beginRun();
    flows.push(flow);
    observe?.(flow, clock, m);
    const stop = await execute(
      state,
      { dryRun: false, maxCredits: null, retry: DEFAULT_RETRY_POLICY, matchesQueued: 160, graceMs: 1000 },
      { client, flow, store: run, clock, random, idempotencyKey: (c, v) => `${c.domain}-${v}`, planCompany: () => {}, progress: new Progress().sink },
      new AbortController().signal,
    );
    if (stop !== null) throw new Error(`simulation stopped: ${stop.reason}`);
    ended.set(run.runId, clock.now());
    await run.endRun({ status: 'done', credits: 0, bought: 0, reused: 0 });
  };
  const ended = new Map<number, number>();
  await clock.run(Promise.all(Array.from({ length: machines }, (_, m) => machine(m))), 3_600_000);
  return { ...service.result(clock.now(), flows.reduce((n, f) => n + f.pauses, 0)), asks: store.asks, ended };
}

/**
 * A client told the ceiling, on the same model (the bench's baseline-paced.mjs): `workers` loops,
 * every request one fixed interval after the last, a 429 retried after its Retry-After in the same
 * schedule. What the service's jitter allows a client that need not learn anything.
 */
export async function simulatePaced(server: SimServerOptions, domains: number, intervalMs: number, workers = 16): Promise<SimResult> {
  const clock = new SimClock();
  const service = new SimService(server, clock, mulberry32(server.seed ?? 1));
  let last = Number.NEGATIVE_INFINITY;
  const slot = async (): Promise<void> => {
    const at = Math.max(clock.now(), last + intervalMs);
    last = at;
    await clock.until(at);
  };
  const call = async (): Promise<void> => {
    for (;;) {
      await slot();
      try {
        await service.answer(null);
        return;
      } catch (error) {
        await clock.sleep((error as RateLimitedError).retryAfterSeconds * 1000);
      }
    }
  };
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < domains) {
      next++;
      await call(); // the match
      await call(); // the enrich
    }
  };
  await clock.run(Promise.all(Array.from({ length: workers }, worker)), 3_600_000);
  return service.result(clock.now(), 0);
}
