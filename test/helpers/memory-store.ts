import type { CompanyRecord } from '../../src/api/types.js';
import type { BudgetLine } from '../../src/store/budget.js';
import { decideBatch, publicPart, replacesHeld, type KeptPurchase } from '../../src/store/purchase.js';
import type { Claim, CompanyState, HeldCompany, Lookup, RunEnd, RunsUnderWay, ServiceStore, StoreEvent } from '../../src/store/types.js';

/**
 * A store in memory that keeps the contract (src/store/types.ts ServiceStore) with the very
 * purchase rules every backend uses (src/store/purchase.ts): a claim here can be busy, held or
 * moved as on SQLite, so pipeline tests meet them without a database. Runs of one MemoryStore
 * share its records, as processes share a store file; a run is alive until it ends or `kill`.
 */
/** One service's records: services never mix, as in every backend. */
export class MemoryTables {
  readonly lookups = new Map<string, Lookup>();
  readonly companies = new Map<string, { held: HeldCompany; record: CompanyRecord }>();
  readonly purchases = new Map<string, KeptPurchase>();

  latest(domain: string): KeptPurchase | null {
    let found: KeptPurchase | null = null;
    for (const p of this.purchases.values()) if (p.domain === domain && (found === null || p.generation > found.generation)) found = p;
    return found;
  }
}

export class MemoryStore {
  readonly storeId = 'memory';
  private nextRun = 1;
  private readonly live = new Set<number>();
  private readonly services = new Map<string, MemoryTables>();
  /** Every event appended by any run, in order. */
  readonly events: StoreEvent[] = [];
  /** Each ask of otherRuns: which run, when (by `now`). */
  readonly asks: { run: number; at: number }[] = [];

  constructor(readonly now: () => number = Date.now) {}

  beginRun(service = 'svc'): MemoryRun {
    const run = this.nextRun++;
    this.live.add(run);
    let tables = this.services.get(service);
    if (tables === undefined) this.services.set(service, (tables = new MemoryTables()));
    return new MemoryRun(this, tables, service, run);
  }

  /** As a kill -9 would: the run's claims are left to be taken over. */
  kill(run: number): void {
    this.live.delete(run);
  }

  liveRuns(): number[] {
    return [...this.live];
  }

  alive(run: number): boolean {
    return this.live.has(run);
  }
}

const key = (domain: string, generation: number): string => `${domain}#${generation}`;

export class MemoryRun implements ServiceStore {
  readonly storeId: string;
  readonly policyNow: number;

  constructor(
    private readonly store: MemoryStore,
    private readonly tables: MemoryTables,
    readonly service: string,
    readonly runId: number,
  ) {
    this.storeId = store.storeId;
    this.policyNow = store.now();
  }

  /** The memory store keeps no budgets: the pipeline tests' runs are never capped. */
  async budget(): Promise<BudgetLine[]> {
    return [];
  }

  async loadLookups(domains: readonly string[], indexOf: (domain: string) => number | undefined, visit: (index: number, lookup: Lookup) => void): Promise<void> {
    for (const domain of domains) {
      const lookup = this.tables.lookups.get(domain);
      const i = indexOf(domain);
      if (lookup !== undefined && i !== undefined) visit(i, lookup);
    }
  }

  async loadCompanies(companies: readonly string[], visit: (domain: string, state: CompanyState) => void): Promise<void> {
    for (const domain of companies) {
      const state = this.now(domain);
      if (state.held !== null || state.purchase !== null) visit(domain, state);
    }
  }

  async companyState(company: string): Promise<CompanyState> {
    return this.now(company);
  }

  private now(domain: string): CompanyState {
    const latest = this.tables.latest(domain);
    return { held: this.tables.companies.get(domain)?.held ?? null, purchase: latest === null ? null : publicPart(latest) };
  }

  async records(companies: readonly string[]): Promise<Map<string, CompanyRecord>> {
    const found = new Map<string, CompanyRecord>();
    for (const c of companies) {
      const record = this.tables.companies.get(c)?.record;
      if (record !== undefined) found.set(c, record);
    }
    return found;
  }

  async holdsAny(): Promise<boolean> {
    return this.tables.companies.size > 0 || this.tables.purchases.size > 0;
  }

  async creditsSince(since: number): Promise<{ charged: number; unconfirmed: number }> {
    const spend = { charged: 0, unconfirmed: 0 };
    for (const p of this.tables.purchases.values()) {
      if (p.closedAt === null || p.closedAt < since) continue;
      spend.charged += p.credits;
      spend.unconfirmed += p.unconfirmed;
    }
    return spend;
  }

  /** Simpler than SQLite's rule (docs/money.md): bought by another run before this one began. */
  async savedAmong(companies: readonly string[]): Promise<number> {
    return companies.filter((c) => {
      const p = this.tables.latest(c);
      return p !== null && p.outcome === 'hit' && p.run !== this.runId && (p.closedAt ?? 0) < this.policyNow;
    }).length;
  }

  leaseLapsed(): boolean {
    return false;
  }

  async renewLease(): Promise<void> {}

  leaseEpoch(): number {
    return 0;
  }

  async append(event: StoreEvent, _durable?: boolean): Promise<Claim> {
    this.store.events.push(event);
    return this.apply(event);
  }

  private apply(event: StoreEvent): Claim {
    const now = this.store.now();
    const run = this.runId;
    const t = this.tables;
    if (event.type === 'match') {
      if (event.status !== 'error') t.lookups.set(event.domain, { status: event.status, company: event.company ?? null, name: event.name ?? null, checkedAt: now });
      return { kind: 'ok' };
    }
    const decision = decideBatch(
      [event],
      {
        purchase: (c, g) => t.purchases.get(key(c, g)) ?? null,
        holding: (c) => t.companies.get(c)?.held ?? null,
        caps: () => [],
        person: () => null,
        alive: (r) => this.store.alive(r),
        pruned: () => false,
      },
      run,
      now,
    );
    for (const p of decision.purchases) t.purchases.set(key(p.domain, p.generation), p);
    for (const { event: e, at } of decision.records) {
      const held = t.companies.get(e.company)?.held;
      if (held === undefined || replacesHeld(e.generation, at, held)) {
        t.companies.set(e.company, { held: { domain: e.company, name: e.record.name, boughtAt: at, lastUpdated: e.record.last_updated || null, generation: e.generation, credits: e.charged ?? 0 }, record: e.record });
      }
    }
    const answer = decision.answers[0] as NonNullable<(typeof decision.answers)[0]>;
    return 'busy' in answer ? { kind: 'busy' } : answer;
  }

  async flush(): Promise<void> {}

  async close(): Promise<void> {}

  async endRun(_end: RunEnd): Promise<void> {
    this.store.kill(this.runId);
  }

  async otherRuns(): Promise<RunsUnderWay> {
    this.store.asks.push({ run: this.runId, at: this.store.now() });
    return { under: this.store.liveRuns().filter((id) => id !== this.runId), last: 0 };
  }

  async releaseClaims(): Promise<void> {
    for (const [k, p] of this.tables.purchases) if (p.ownerRun === this.runId) this.tables.purchases.set(k, { ...p, ownerRun: null });
  }
}

/** A run on a fresh memory store, with every event it was told (pipeline tests). */
export function memoryStore(): MemoryRun & { events: StoreEvent[] } {
  const store = new MemoryStore();
  const run = store.beginRun();
  return Object.assign(run, { events: store.events });
}
