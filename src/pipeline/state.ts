import type { EnrichEvent, HeldCompany, MatchEvent, Purchase, StoreEvent } from '../store/types.js';
import type { CompanyPlan, DomainPlan } from './plan.js';
import { IntVector } from './vector.js';

/** Where a domain's free match stands. */
export const Match = { PENDING: 0, HIT: 1, MISS: 2, ERROR: 3 } as const;
export type MatchStatus = (typeof Match)[keyof typeof Match];

/** A canonical company the service matched: enriched (and charged) at most once. */
export interface Company {
  readonly index: number;
  readonly domain: string;
  name: string;
  status: 'pending' | 'hit' | 'miss' | 'error';
  /** Where a hit's record comes from: bought by this run, or reused from the store. */
  source: 'bought' | 'store' | null;
  /** When the record shown was bought (ms since the epoch); null when none is held. */
  boughtAt: number | null;
  /** The purchase generation this run buys (or bought) under: 1 at first, +1 per refresh. */
  generation: number;
  /** The store holds an older record that this run refreshes. */
  refresh: boolean;
  /** This run has written (or confirmed) the intent for the purchase: it owns it. */
  claimed: boolean;
  /** Version of the Idempotency-Key the next (or the unanswered) attempt uses. */
  keyVersion: number;
  /** The key of the intent on disk under keyVersion, as written (null: none is open): what every retry and resume sends. */
  intentKey: string | null;
  /**
   * An attempt under keyVersion may have been charged without us seeing the answer (a lost
   * answer, or a crash after the intent). Such a key is never retired on an error's word alone.
   */
  keyUncertain: boolean;
  /** Keys this run retired on the settle rule (pipeline/keys.ts): each may have been charged. */
  unconfirmed: number;
  /** When an attempt under keyVersion last went unanswered (ms since the epoch); null: none. */
  lostAt: number | null;
  errorCode: string | null;
  /** The error cannot be cured by asking again (422); otherwise a later run retries. */
  errorFinal: boolean;
  charged: number;
}

export interface MatchError {
  code: string;
  final: boolean;
}

/**
 * Everything the batch knows, keyed compactly: the unique input domains in first-seen order with
 * their match state in typed arrays (a million domains cost tens of MB, not hundreds), and the
 * matched companies. What the store knew is loaded through the plan; live outcomes go through
 * `apply`, the same events the store writes.
 */
export class RunState {
  private readonly domainIndex = new Map<string, number>();
  readonly domains: string[] = [];
  private readonly matchStatus = new IntVector(Uint8Array);
  private readonly matchCompany = new IntVector(Int32Array);
  private readonly matchErrors = new Map<number, MatchError>();

  private readonly companyIndex = new Map<string, number>();
  readonly companies: Company[] = [];

  /** Credits charged by this invocation's answers. */
  creditsThisSession = 0;
  /** Keys this invocation retired on the settle rule: credits that may have been charged unseen. */
  unconfirmedThisSession = 0;
  creditsRemaining: number | null = null;

  /** Registers an input domain; returns its index (stable, first-seen order). */
  addDomain(domain: string): number {
    let i = this.domainIndex.get(domain);
    if (i === undefined) {
      i = this.domains.length;
      this.domains.push(domain);
      this.domainIndex.set(domain, i);
      this.matchStatus.push(Match.PENDING);
      this.matchCompany.push(-1);
    }
    return i;
  }

  indexOf(domain: string): number | undefined {
    return this.domainIndex.get(domain);
  }

  get domainCount(): number {
    return this.domains.length;
  }

  matchOf(d: number): MatchStatus {
    return this.matchStatus.get(d) as MatchStatus;
  }

  companyOf(d: number): Company | undefined {
    const c = this.matchCompany.get(d);
    return c < 0 ? undefined : this.companies[c];
  }

  matchError(d: number): MatchError | undefined {
    return this.matchErrors.get(d);
  }

  company(domain: string): Company | undefined {
    const c = this.companyIndex.get(domain);
    return c === undefined ? undefined : this.companies[c];
  }

  /** What the store knew of input domain d, as the plan judged it. */
  loadDomain(d: number, plan: DomainPlan): void {
    if (plan.action === 'hit') {
      this.matchStatus.set(d, Match.HIT);
      this.matchCompany.set(d, this.addCompany(plan.company, plan.name).index);
    } else if (plan.action === 'miss') {
      this.matchStatus.set(d, Match.MISS);
    }
  }

  /** What the store holds of a matched company, as the plan judged it. */
  loadCompany(c: Company, plan: CompanyPlan): void {
    switch (plan.action) {
      case 'reuse':
        this.reuse(c, plan.held);
        return;
      case 'no_match':
        c.status = plan.code === null ? 'miss' : 'error';
        c.errorCode = plan.code;
        c.errorFinal = plan.code !== null;
        if (plan.held !== null) c.boughtAt = plan.held.boughtAt;
        return;
      case 'buy':
        c.generation = plan.generation;
        c.refresh = plan.refresh;
        c.boughtAt = plan.held?.boughtAt ?? null;
        if (plan.resume !== null) this.adopt(c, plan.resume);
        return;
    }
  }

  /** The store's record will do: nothing to buy. */
  reuse(c: Company, held: HeldCompany): void {
    c.status = 'hit';
    c.source = 'store';
    c.boughtAt = held.boughtAt;
    c.generation = held.generation;
    c.intentKey = null;
    c.errorCode = null;
  }

  /** Takes over a purchase's key state as the store has it (a resume, or another run's move). */
  adopt(c: Company, p: Purchase): void {
    c.generation = p.generation;
    if (p.outcome === 'miss' || p.outcome === 'failed') {
      c.status = p.outcome === 'miss' ? 'miss' : 'error';
      c.errorCode = p.outcome === 'failed' ? (p.errorCode ?? 'error') : null;
      c.errorFinal = p.outcome === 'failed';
      return;
    }
    c.keyVersion = p.keyVersion;
    c.intentKey = p.intentKey;
    // An intent written by another invocation may have been sent before it stopped.
    c.keyUncertain = p.intentKey !== null || p.uncertain;
    c.lostAt = p.lostAt;
    c.claimed = false;
  }

  /** A live outcome of this run: the same event the store writes. */
  apply(event: StoreEvent): void {
    switch (event.type) {
      case 'match':
        this.applyMatch(event);
        return;
      case 'intent': {
        const c = this.company(event.company);
        if (c === undefined) return;
        c.keyVersion = event.keyVersion;
        c.intentKey = event.key;
        c.claimed = true;
        return;
      }
      case 'enrich':
        this.applyEnrich(event);
        return;
      case 'release': {
        const c = this.company(event.company);
        if (c !== undefined) c.claimed = false;
        return;
      }
      case 'unclaim': {
        const c = this.company(event.company);
        if (c === undefined) return;
        c.intentKey = null;
        c.claimed = false;
        return;
      }
    }
  }

  private applyMatch(entry: MatchEvent): void {
    const d = this.domainIndex.get(entry.domain);
    if (d === undefined) return;
    if (entry.status === 'hit' && entry.company !== undefined) {
      this.matchStatus.set(d, Match.HIT);
      this.matchCompany.set(d, this.addCompany(entry.company, entry.name ?? entry.company).index);
      this.matchErrors.delete(d);
    } else if (entry.status === 'miss') {
      this.matchStatus.set(d, Match.MISS);
      this.matchErrors.delete(d);
    } else if (entry.status === 'error') {
      this.matchStatus.set(d, Match.ERROR);
      this.matchErrors.set(d, { code: entry.code ?? 'error', final: entry.final === true });
    }
  }

  /** True when the company is new to this run: the caller asks the store what it holds of it. */
  hasCompany(domain: string): boolean {
    return this.companyIndex.has(domain);
  }

  private addCompany(domain: string, name: string): Company {
    const existing = this.company(domain);
    if (existing !== undefined) return existing;
    const company: Company = {
      index: this.companies.length,
      domain,
      name,
      status: 'pending',
      source: null,
      boughtAt: null,
      generation: 1,
      refresh: false,
      claimed: false,
      keyVersion: 1,
      intentKey: null,
      keyUncertain: false,
      unconfirmed: 0,
      lostAt: null,
      errorCode: null,
      errorFinal: false,
      charged: 0,
    };
    this.companies.push(company);
    this.companyIndex.set(domain, company.index);
    return company;
  }

  private applyEnrich(entry: EnrichEvent): void {
    const c = this.company(entry.company);
    if (c === undefined) return;
    const charged = entry.charged ?? 0;
    c.charged += charged;
    this.creditsThisSession += charged;
    // Answers arrive out of order, and a replay carries the balance of its first time: the lowest
    // balance seen is the freshest (it only falls while a run spends).
    if (entry.remaining !== undefined) this.creditsRemaining = Math.min(entry.remaining, this.creditsRemaining ?? entry.remaining);
    if (entry.status === 'hit' || entry.status === 'miss') {
      c.status = entry.status;
      c.source = entry.status === 'hit' ? 'bought' : null;
      c.boughtAt = entry.status === 'hit' ? (entry.at ?? Date.now()) : c.boughtAt;
      c.intentKey = null;
      c.errorCode = null;
      return;
    }
    c.status = 'error';
    c.errorCode = entry.code ?? 'error';
    c.errorFinal = entry.final === true;
    if (entry.verdict === 'retired') {
      // Proven uncharged: a service that stored this error under the key would replay it
      // forever, so the next attempt gets a new one.
      c.keyVersion = entry.keyVersion + 1;
      c.intentKey = null;
      c.keyUncertain = false;
      c.lostAt = null;
      if (entry.unconfirmed === true) {
        c.unconfirmed++;
        this.unconfirmedThisSession++;
      }
    } else if (entry.final !== true) {
      c.keyUncertain = true;
      if (entry.lost === true && entry.at !== undefined) c.lostAt = entry.at;
    }
  }

  /** Domains whose match is still owed: never asked, or failed in a way asking again can cure. */
  needsMatch(d: number): boolean {
    const s = this.matchOf(d);
    return s === Match.PENDING || (s === Match.ERROR && this.matchErrors.get(d)?.final !== true);
  }

  needsEnrich(c: Company): boolean {
    return c.status === 'pending' || (c.status === 'error' && !c.errorFinal);
  }

  /** Whether any domain's match is known (answered by this run, or read from the store). */
  knowsAny(): boolean {
    for (let d = 0; d < this.domainCount; d++) {
      const s = this.matchOf(d);
      if (s === Match.HIT || s === Match.MISS) return true;
    }
    return false;
  }

  /** Domains whose free match has no answer yet (it failed, or the run stopped before it). */
  unansweredDomains(): number {
    let n = 0;
    for (let d = 0; d < this.domainCount; d++) {
      const s = this.matchOf(d);
      if (s === Match.PENDING || s === Match.ERROR) n++;
    }
    return n;
  }

  /** Companies left waiting on a paid call whose answer never came: a credit each at most. */
  atRisk(): number {
    let n = 0;
    for (const c of this.companies) if (this.needsEnrich(c) && c.keyUncertain) n++;
    return n;
  }

  /** Companies this run still owes a purchase, and how many of those refresh a held record. */
  owed(): { buy: number; refresh: number } {
    let buy = 0;
    let refresh = 0;
    for (const c of this.companies) {
      if (!this.needsEnrich(c)) continue;
      buy++;
      if (c.refresh) refresh++;
    }
    return { buy, refresh };
  }
}
