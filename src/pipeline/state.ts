import type { EnrichEntry, EventEntry, MatchEntry } from '../journal/entries.js';
import { IntVector } from './vector.js';

const NO_IDS: ReadonlySet<string> = new Set();

/** Where a domain's free match stands. */
export const Match = { PENDING: 0, HIT: 1, MISS: 2, ERROR: 3 } as const;
export type MatchStatus = (typeof Match)[keyof typeof Match];

export interface RecordRef {
  offset: number;
  length: number;
}

/** A canonical company the service matched: enriched (and charged) at most once. */
export interface Company {
  readonly index: number;
  readonly domain: string;
  name: string;
  status: 'pending' | 'hit' | 'miss' | 'error';
  /** Version of the Idempotency-Key the next (or the unanswered) attempt uses. */
  keyVersion: number;
  /** An intent at keyVersion is on disk: attempts under this key may go without writing another. */
  intentOpen: boolean;
  /** The Idempotency-Key that intent names, as written: what every retry and resume sends. */
  intentKey: string | null;
  /**
   * An attempt under keyVersion may have been charged without us seeing the answer (a lost
   * answer, or a crash after the intent). Such a key is never retired on an error's word alone.
   */
  keyUncertain: boolean;
  /** requestIds of error answers seen under keyVersion: the same one again is a replay. */
  errorIds: ReadonlySet<string>;
  /** The journal line holding the enrich answer, read back when results are written. */
  record: RecordRef | null;
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
 * matched companies. Replayed journal entries and live outcomes go through the same `apply`.
 */
export class RunState {
  private readonly domainIndex = new Map<string, number>();
  readonly domains: string[] = [];
  private readonly matchStatus = new IntVector(Uint8Array);
  private readonly matchCompany = new IntVector(Int32Array);
  private readonly matchErrors = new Map<number, MatchError>();

  private readonly companyIndex = new Map<string, number>();
  readonly companies: Company[] = [];

  /** Credits charged by every enrich answer in the journal, and by this invocation. */
  creditsTotal = 0;
  creditsThisSession = 0;
  creditsRemaining: number | null = null;
  private replaying = true;

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

  /** Replay is over: entries applied from now on are this invocation's own. */
  startSession(): void {
    this.replaying = false;
  }

  apply(entry: EventEntry, offset: number, length: number): void {
    switch (entry.t) {
      case 'match':
        this.applyMatch(entry);
        return;
      case 'intent': {
        const c = this.company(entry.c);
        if (c === undefined) return;
        if (c.keyVersion !== entry.v) c.errorIds = NO_IDS;
        c.keyVersion = entry.v;
        c.intentOpen = true;
        c.intentKey = entry.key;
        // Replayed, an intent may have been sent before the crash; live, nothing is sent yet.
        c.keyUncertain = this.replaying;
        return;
      }
      case 'enrich':
        this.applyEnrich(entry, offset, length);
        return;
      case 'session':
        return;
    }
  }

  private applyMatch(entry: MatchEntry): void {
    // A journal from the same input names only domains of this input; anything else is ignored.
    const d = this.domainIndex.get(entry.d);
    if (d === undefined) return;
    if (entry.s === 'hit' && entry.c !== undefined) {
      this.matchStatus.set(d, Match.HIT);
      this.matchCompany.set(d, this.addCompany(entry.c, entry.n ?? entry.c).index);
      this.matchErrors.delete(d);
    } else if (entry.s === 'miss') {
      this.matchStatus.set(d, Match.MISS);
      this.matchErrors.delete(d);
    } else if (entry.s === 'error') {
      this.matchStatus.set(d, Match.ERROR);
      this.matchErrors.set(d, { code: entry.code ?? 'error', final: entry.final === true });
    }
  }

  private addCompany(domain: string, name: string): Company {
    const existing = this.company(domain);
    if (existing !== undefined) return existing;
    const company: Company = {
      index: this.companies.length,
      domain,
      name,
      status: 'pending',
      keyVersion: 1,
      intentOpen: false,
      intentKey: null,
      keyUncertain: false,
      errorIds: NO_IDS,
      record: null,
      errorCode: null,
      errorFinal: false,
      charged: 0,
    };
    this.companies.push(company);
    this.companyIndex.set(domain, company.index);
    return company;
  }

  private applyEnrich(entry: EnrichEntry, offset: number, length: number): void {
    const c = this.company(entry.c);
    if (c === undefined) return;
    const charged = entry.charged ?? 0;
    c.charged += charged;
    this.creditsTotal += charged;
    if (!this.replaying) this.creditsThisSession += charged;
    if (entry.remaining !== undefined) this.creditsRemaining = entry.remaining;
    if (entry.s === 'hit') {
      c.status = 'hit';
      c.record = { offset, length };
      c.intentOpen = false;
      c.intentKey = null;
      c.errorCode = null;
    } else if (entry.s === 'miss') {
      c.status = 'miss';
      c.intentOpen = false;
      c.intentKey = null;
      c.errorCode = null;
    } else {
      c.status = 'error';
      c.errorCode = entry.code ?? 'error';
      c.errorFinal = entry.final === true;
      if (entry.key === 'retired') {
        // Proven uncharged: a service that stored this error under the key would replay it
        // forever, so the next attempt gets a new one.
        c.keyVersion = entry.v + 1;
        c.intentOpen = false;
        c.intentKey = null;
        c.keyUncertain = false;
        c.errorIds = NO_IDS;
      } else {
        c.keyUncertain = true;
        // Errors are rare: a company gets a set of its own only when it has one to remember.
        if (entry.rid !== undefined) c.errorIds = new Set([...c.errorIds, entry.rid]);
      }
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
}
