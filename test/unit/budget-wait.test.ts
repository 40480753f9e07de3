import { describe, expect, it } from 'vitest';
import type { ServiceClient } from '../../src/api/client.js';
import { systemClock } from '../../src/pipeline/clock.js';
import { execute, type EventSink } from '../../src/pipeline/execute.js';
import { Progress } from '../../src/pipeline/progress.js';
import { Flow } from '../../src/pipeline/flow.js';
import { RunState } from '../../src/pipeline/state.js';
import { applyOutcome, applyRelease, applyUnclaim, decideClaim, type KeptPurchase } from '../../src/store/purchase.js';
import type { Claim, StoreEvent } from '../../src/store/types.js';
import { companyRecord } from '../helpers/records.js';

/**
 * The pipeline's wait on a monthly cap (pipeline/enrich-step.ts), against a store of one cap: room
 * = cap - spent - held, read when a claim is decided (as both stores do, in the claim's transaction).
 */
class CappedSink implements EventSink {
  readonly purchases = new Map<string, KeptPurchase>();
  readonly events: StoreEvent[] = [];
  constructor(
    private readonly cap: number,
    /** Runs once a claim is decided, before it is answered. */
    private readonly beforeAnswer: (domain: string) => Promise<void>,
    /** Told of each event once written. */
    private readonly written: (event: StoreEvent) => void = () => {},
  ) {}
  room(): number {
    let used = 0;
    for (const p of this.purchases.values()) {
      if (p.outcome !== 'open') used += p.credits + p.unconfirmed;
      else if (p.intentKey !== null || p.uncertain) used += (p.reserved || 1) + p.unconfirmed;
      else used += p.unconfirmed;
    }
    return this.cap - used;
  }
  async append(event: StoreEvent): Promise<Claim> {
    this.events.push(event);
    const now = Date.now();
    const run = 1;
    const save = (p: KeptPurchase | null): void => {
      if (p !== null) this.purchases.set(p.domain, p);
    };
    switch (event.type) {
      case 'match':
        return { kind: 'ok' };
      case 'intent': {
        const d = decideClaim({ held: null, kept: this.purchases.get(event.company) ?? null, event, run, now, alive: () => true, person: null, room: { person: null, cap: this.cap, left: this.room() } });
        if ('busy' in d) return { kind: 'busy' };
        save(d.write);
        await this.beforeAnswer(event.company);
        return d.claim;
      }
      case 'enrich':
        save(applyOutcome(this.purchases.get(event.company) ?? null, event, run, now));
        this.written(event);
        return { kind: 'ok' };
      case 'release':
        save(applyRelease(this.purchases.get(event.company) ?? null, event, run));
        return { kind: 'ok' };
      case 'unclaim':
        save(applyUnclaim(this.purchases.get(event.company) ?? null, event, run));
        return { kind: 'ok' };
    }
  }
}

function stateFor(domains: string[]): RunState {
  const state = new RunState();
  for (const d of domains) state.loadDomain(state.addDomain(d), { action: 'hit', company: d, name: d });
  for (const c of state.companies) state.loadCompany(c, { action: 'buy', generation: 1, refresh: false, held: null, resume: null });
  return state;
}

const matchAll: ServiceClient['match'] = async (domain) => ({ matched: true, credits_charged: 0, company: { domain, name: domain } });

function go(state: RunState, client: ServiceClient, store: EventSink, concurrency: number, maxCredits: number | null = null): ReturnType<typeof execute> {
  return execute(
    state,
    { dryRun: false, maxCredits, retry: { maxAttempts: 3, maxRateLimitedAttempts: 3, baseDelayMs: 2, maxDelayMs: 4 }, matchesQueued: 4, graceMs: 100, settleMs: 5 },
    {
      client,
      flow: new Flow(systemClock, concurrency),
      store,
      planCompany: () => {},
      clock: systemClock,
      random: () => 0.5,
      idempotencyKey: (c, v) => `${c.domain}#${v}`,
      progress: new Progress().sink,
    },
    new AbortController().signal,
  );
}

/** Resolves once `open` is called: a step of one fake waits for a step of another, never for a clock. */
function gate(): { wait: Promise<void>; open(): void } {
  let open = (): void => {};
  const wait = new Promise<void>((resolve) => (open = resolve));
  return { wait, open };
}

describe('a run the monthly cap turns away', () => {
  it('asks again when its own purchase freed room while its claim was out, rather than stop', async () => {
    // Cap 1: y.com takes the credit; x.com's claim is decided with no room, and its answer comes
    // back only once y.com's miss (which gives the credit back) is written.
    const xDecided = gate();
    const yMissed = gate();
    const sink = new CappedSink(1, async (d) => {
      if (d !== 'x.com') return;
      xDecided.open();
      await yMissed.wait;
    }, (e) => {
      if (e.type === 'enrich' && e.company === 'y.com') yMissed.open();
    });
    const client: ServiceClient = {
      match: matchAll,
      enrich: async (domain) => {
        if (domain === 'y.com') {
          await xDecided.wait;
          return { matched: false, credits_charged: 0, credits_remaining: 10, company: null };
        }
        return { matched: true, credits_charged: 1, credits_remaining: 10, company: companyRecord(domain) };
      },
    };
    const state = stateFor(['y.com', 'x.com']);
    const stop = await go(state, client, sink, 4);
    expect(stop).toBeNull();
    expect(state.companies.find((c) => c.domain === 'x.com')?.status).toBe('hit');
    expect(sink.room()).toBe(0);
  });
});
