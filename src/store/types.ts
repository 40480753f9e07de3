import type { CompanyRecord } from '../api/types.js';
import type { BudgetLine } from './budget.js';

/** The store's vocabulary: the events the pipeline writes and what the store answers; both backends implement ServiceStore. */

/** The free match's answer for one registrable domain. Errors are kept for this run only. */
export interface MatchEvent {
  type: 'match';
  domain: string;
  status: 'hit' | 'miss' | 'error';
  /** hit: the canonical domain and name the service answered. */
  company?: string;
  name?: string;
  /** error: the problem code; final when asking again cannot help (422). */
  code?: string;
  final?: boolean;
}

/**
 * Made durable before the paid request leaves: a crash after it resumes with the same key, and the service replays
 * instead of charging again. `generation` counts purchases of the company, `keyVersion` the key within one.
 */
export interface IntentEvent {
  type: 'intent';
  company: string;
  generation: number;
  keyVersion: number;
  key: string;
  /** When it was written (ms since the epoch): from then the request may be in flight. */
  at?: number;
  /** The buyer's freshness rule (plan.ts freshSince): a record bought at or after it (null: any) is held, and not bought again. Unset: only this generation or later counts. */
  freshSince?: number | null;
  /** Credits the call costs (store/budget.ts ENRICH_PRICE by default): what its reservation holds under a monthly cap. */
  price?: number;
  /** How long the request may run at the service once its answer is lost: the sending run's settle (Purchase.settleMs). */
  settleMs?: number;
}

export interface EnrichEvent {
  type: 'enrich';
  company: string;
  generation: number;
  keyVersion: number;
  status: 'hit' | 'miss' | 'error';
  charged?: number;
  remaining?: number;
  record?: CompanyRecord;
  /** hit/miss: when the answer came (ms since the epoch): the record's bought_at. */
  at?: number;
  /** The Idempotency-Key the answer came under (an imported journal's: its key, which alone its events may move). */
  keyUsed?: string;
  /** error: the problem code (network_error when no answer came). */
  code?: string;
  /** error: "retired": no attempt under the key can have been charged, the next takes v+1; "kept": one may have been charged unseen, so retries must reuse the key. */
  verdict?: 'retired' | 'kept';
  /** error, retired on the settle rule (pipeline/run-purchase.ts): the answer was lost, so it counts as possibly spent. */
  unconfirmed?: boolean;
  /** error: asking again cannot help (422). */
  final?: boolean;
  /** error: no answer came (the attempt may be running still, or charged) as of `at`. */
  lost?: boolean;
  /** error, lost: the settle of the run that lost it (Purchase.settleMs). */
  settleMs?: number;
}

/** An intent this run wrote but sent nothing under (a stop, a cap, an interrupt): nothing under its key is at risk. */
export interface UnclaimEvent {
  type: 'unclaim';
  company: string;
  generation: number;
  keyVersion: number;
  key: string;
}

/**
 * This run gives up a purchase it could not finish; it keeps its key, and other runs take it over as from a gone run.
 * Without it, two runs each waiting on a company the other had failed would wait for each other to exit.
 */
export interface ReleaseEvent {
  type: 'release';
  company: string;
  generation: number;
}

export type StoreEvent = MatchEvent | IntentEvent | EnrichEvent | UnclaimEvent | ReleaseEvent;

/** What an intent found when it was written: go ahead, or another run got there first. */
export type Claim =
  /** The intent is durable; the call may go. `tookOver`: a gone run's intent under the same key was taken over, so it may have been charged unseen. */
  | { kind: 'ok'; tookOver?: boolean; settleMs?: number }
  /** Another live run holds an open intent for this purchase: wait for its outcome. `pid`/`host` name that run for display. */
  | { kind: 'busy'; pid?: number; host?: string }
  /** Another run has bought this company (this generation or later) since the plan was made. */
  | { kind: 'held'; held: HeldCompany }
  /** Another run moved this purchase on (a new key version, or an outcome) since it was read. */
  | { kind: 'moved'; purchase: Purchase }
  /** A monthly budget (store/budget.ts) has no room for this call's price: nothing was written, nothing may be sent. */
  | { kind: 'capped'; person: string | null; cap: number }
  /** The store was pruned since this run began: a key it derives may repeat one sent before, and what it planned is gone. Nothing was written. */
  | { kind: 'pruned' };

export interface Lookup {
  status: 'hit' | 'miss';
  /** hit: the canonical company domain and name. */
  company: string | null;
  name: string | null;
  /** ms since the epoch. */
  checkedAt: number;
}

/** A company the store holds a record of. */
export interface HeldCompany {
  domain: string;
  name: string;
  boughtAt: number;
  lastUpdated: string | null;
  generation: number;
  credits: number;
}

/** The latest purchase of a company: where its Idempotency-Key stands. */
export interface Purchase {
  domain: string;
  generation: number;
  keyVersion: number;
  /** The key of the open intent under keyVersion, as written; null when none is open. */
  intentKey: string | null;
  /** An attempt under keyVersion may have been charged unseen. */
  uncertain: boolean;
  /** Keys of this purchase retired on the settle rule: each may have been charged (a credit at most). */
  unconfirmed: number;
  /** When an attempt under keyVersion last went unanswered (or its intent was written). */
  lostAt: number | null;
  /** How long that attempt may still run at the service: the longest settle of the runs that sent under the key; null: the run's own. */
  settleMs: number | null;
  errorCode: string | null;
  outcome: 'open' | 'hit' | 'miss' | 'failed';
  closedAt: number | null;
}

export interface RunInfo {
  inputName: string;
  inputSha256: string;
  rows: number;
  dryRun: boolean;
  /** The options that change what is bought (never the key). */
  options: Record<string, unknown>;
}

export interface RunEnd {
  status: string;
  credits: number;
  bought: number;
  reused: number;
}

/** ServiceStore.otherRuns: the runs under way, and the newest run id read. */
export interface RunsUnderWay {
  under: readonly number[];
  last: number;
}

/** What the store holds of one company, and its latest purchase, as of one moment. */
export interface CompanyState {
  held: HeldCompany | null;
  purchase: Purchase | null;
}

/** What a run is told of its team store's connection: lost (and why), then back (after how long). */
export type ConnectionNotice = { lost: true; why: string; budgetMs: number } | { lost: false; afterMs: number };

/** A month's spend as the store saw it: charged with an answer seen, and possibly charged (answers lost). */
export interface MonthSpend {
  charged: number;
  unconfirmed: number;
}

/**
 * One service's records and one run's writes to them, with nothing of how a backend keeps them. Reads are batched
 * (a network backend answers many keys per round trip); writes are group-committed; a claim is decided in the intent's transaction.
 */
export interface ServiceStore {
  readonly service: string;
  /** The store's identity: part of every Idempotency-Key, so two stores never share keys. */
  readonly storeId: string;
  readonly runId: number;
  /** The moment this run judges freshness at: now, or the cutoff of the job it resumes. */
  readonly policyNow: number;
  /** Calls visit for each of `domains` the store has looked up (indexOf: the domain's index in the run). */
  loadLookups(domains: readonly string[], indexOf: (domain: string) => number | undefined, visit: (index: number, lookup: Lookup) => void): Promise<void>;
  /** Calls visit for each of `companies` the store knows, with what it holds and its latest purchase, all as of one moment. */
  loadCompanies(companies: readonly string[], visit: (domain: string, state: CompanyState) => void): Promise<void>;
  /** loadCompanies for one company (one first met mid-run). */
  companyState(company: string): Promise<CompanyState>;
  /** The records held of these companies, as the service returned them (a company not held is absent). */
  records(companies: readonly string[]): Promise<Map<string, CompanyRecord>>;
  /** Whether the store holds any company or purchase of this service at all. */
  holdsAny(): Promise<boolean>;
  /** Credits this service's purchases closed since `since` were charged, and apart, keys retired as possibly charged (the month so far). */
  creditsSince(since: number): Promise<MonthSpend>;
  /** This month's budget lines that apply to this run (the store's, this run's person's); none without a cap. */
  budget(): Promise<BudgetLine[]>;
  /** Of these companies this run reused, how many the account would otherwise have paid for again (docs/money.md). */
  savedAmong(companies: readonly string[]): Promise<number>;
  /** This run's hold on its claims may have lapsed (it was paused): claim again before sending. */
  leaseLapsed(): boolean;
  /** Lapses of this run's lease so far (store/heartbeat.ts epoch): a claim made in an earlier one must be made again. */
  leaseEpoch(): number;
  /** Renews this run's lease now (after a lapse, before claiming again); rejects if the store cannot be written. */
  renewLease(): Promise<void>;
  /** Queues an event; written with the next group commit. An intent resolves with its claim. */
  append(event: StoreEvent, durable?: boolean): Promise<Claim>;
  /** Writes and syncs everything queued so far. */
  flush(): Promise<void>;
  /** Flushes, then stops the writer if one was started: the last write of a run. */
  close(): Promise<void>;
  endRun(end: RunEnd): Promise<void>;
  /** Releases the open intents this run holds, so other runs need not wait for them. */
  releaseClaims(): Promise<void>;
  /**
   * This service's other runs under way (by status, alive or not), by id: the pipeline's flow probes for the rate one that ends leaves.
   * Reads `known` and the runs after `after` by their ids (null: reads them all); `last` is the newest id read (a later ask's `after`).
   */
  otherRuns(known: readonly number[], after: number | null): Promise<RunsUnderWay>;
  /** Waits until another run's outcome for `company` may have come, or `ms` passed (the team store's NOTIFY wakes it early); never rejects. */
  waitForOutcome?(company: string, ms: number, signal: AbortSignal): Promise<unknown>;
}
