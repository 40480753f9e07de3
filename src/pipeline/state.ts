import type { Claim, EnrichEvent, MatchEvent, StoreEvent } from '../store/types.js';
import type { CompanyPlan, DomainPlan } from './plan.js';
import { errorOf, FIRST_PURCHASE, holdsReservation, isOpen, onClaim, onEnrich, onIntent, onPlan, onRelease, onUnclaim, rowStatus, sourceOf, type KnownPurchase, type Move, type RunPurchase, type TimedIntent } from './run-purchase.js';
import { IntVector } from './vector.js';

export const Match = { PENDING: 0, HIT: 1, MISS: 2, ERROR: 3 } as const;
export type MatchStatus = (typeof Match)[keyof typeof Match];

/** A company the service matched: enriched (and charged) at most once. Its purchase state moves only through run-purchase.ts's transitions. */
export class Company implements KnownPurchase {
  readonly purchase: RunPurchase = FIRST_PURCHASE.purchase;
  readonly generation: number = FIRST_PURCHASE.generation;
  readonly keyVersion: number = FIRST_PURCHASE.keyVersion;
  readonly refresh: boolean = FIRST_PURCHASE.refresh;
  readonly boughtAt: number | null = FIRST_PURCHASE.boughtAt;
  readonly unconfirmed: number = FIRST_PURCHASE.unconfirmed;

  constructor(
    readonly index: number,
    readonly domain: string,
    readonly name: string,
  ) {}

  get status(): 'pending' | 'hit' | 'miss' | 'error' {
    return rowStatus(this.purchase);
  }

  get errorCode(): string | null {
    return errorOf(this.purchase);
  }

  /** Where a hit's record comes from: bought by this run, or reused from the store. */
  get source(): 'bought' | 'store' | null {
    return sourceOf(this.purchase);
  }
}

export interface MatchError {
  code: string;
  final: boolean;
}

/** Everything the batch knows: unique domains in first-seen order with their match state in typed arrays (a million domains: tens of MB), and the matched companies. */
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

  /** Whether every error is a company an earlier run's unusable answer holds back: nothing a rerun could clear, so the run is done, not partial. */
  errorsAllEarlier(): boolean {
    return this.matchErrors.size === 0 && this.companies.every((c) => c.status !== 'error' || (c.purchase.state === 'failed' && c.purchase.earlier === true));
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
    move(c, onPlan(c, plan));
  }

  /** What the store answered this run's intent for a company's purchase (pipeline/run-purchase.ts onClaim). */
  claimAnswered(c: Company, intent: TimedIntent, claim: Claim): void {
    move(c, onClaim(c, intent, claim));
  }

  /** A live outcome of this run: the same event the store writes. */
  apply(event: StoreEvent): void {
    if (event.type === 'match') {
      this.applyMatch(event);
      return;
    }
    const c = this.company(event.company);
    if (c === undefined) return;
    switch (event.type) {
      case 'intent':
        move(c, onIntent(c.purchase, event));
        return;
      case 'enrich':
        this.applyEnrich(c, event);
        return;
      case 'release':
        move(c, onRelease(c.purchase));
        return;
      case 'unclaim':
        move(c, onUnclaim(c.purchase));
        return;
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
    const company = new Company(this.companies.length, domain, name);
    this.companies.push(company);
    this.companyIndex.set(domain, company.index);
    return company;
  }

  private applyEnrich(c: Company, entry: EnrichEvent): void {
    const charged = entry.charged ?? 0;
    this.creditsThisSession += charged;
    // Answers arrive out of order and a replay carries its first balance: the lowest seen is the freshest (it only falls while a run spends).
    if (entry.remaining !== undefined) this.creditsRemaining = Math.min(entry.remaining, this.creditsRemaining ?? entry.remaining);
    if (entry.verdict === 'retired' && entry.unconfirmed === true && entry.status === 'error') this.unconfirmedThisSession++;
    move(c, onEnrich(c, entry, Date.now()));
  }

  /** Domains whose match is still owed: never asked, or failed in a way asking again can cure. */
  needsMatch(d: number): boolean {
    const s = this.matchOf(d);
    return s === Match.PENDING || (s === Match.ERROR && this.matchErrors.get(d)?.final !== true);
  }

  needsEnrich(c: Company): boolean {
    return isOpen(c.purchase);
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
    for (const c of this.companies) if (c.purchase.state === 'uncertain') n++;
    return n;
  }

  /** Companies still to buy, how many refresh a stale record, and how many already hold a budget reservation (a real run finishes them without new room). */
  owed(): { buy: number; refresh: number; reserved: number } {
    let buy = 0;
    let refresh = 0;
    let reserved = 0;
    for (const c of this.companies) {
      if (!this.needsEnrich(c)) continue;
      buy++;
      if (c.refresh) refresh++;
      if (holdsReservation(c.purchase)) reserved++;
    }
    return { buy, refresh, reserved };
  }
}

/** The one place a company's purchase moves: what a transition of run-purchase.ts answered. */
function move(c: Company, m: Move): void {
  Object.assign(c, m);
}
