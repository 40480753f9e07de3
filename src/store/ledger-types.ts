import type { CompanyRecord } from '../api/types.js';
import type { BudgetView } from './budget.js';
import type { JournalTarget } from './import-journal.js';
import type { CopySource, CopyTarget } from './copy-types.js';

/** What `enrich ledger` asks of a store: one interface for both backends (sqlite/ledger.ts, postgres/ledger.ts), every figure meaning the same. */

/** What the store holds for one service: the figures `enrich ledger` shows. */
export interface ServiceHoldings {
  service: string;
  companies: number;
  lookups: number;
  misses: number;
  credits: number;
  runs: number;
  /** Purchases whose intent may have been charged without an answer seen (money at risk). */
  open: number;
  /** Keys retired on the settle rule (pipeline/run-purchase.ts): a credit each may have been charged unseen. */
  unconfirmed: number;
  oldest: number | null;
  newest: number | null;
}

export interface RunRow {
  id: number;
  service: string;
  startedAt: number;
  endedAt: number | null;
  input: string | null;
  rows: number | null;
  dryRun: boolean;
  status: string;
  credits: number;
  bought: number;
  reused: number;
  /** Who ran it: the login name (null: a run recorded before stores kept it) and the host. */
  user: string | null;
  host: string;
}

export interface HeldRecord {
  service: string;
  boughtAt: number;
  credits: number;
  generation: number;
  record: CompanyRecord;
}

/** A purchase whose paid call may have been charged without an answer seen. */
export interface AtRisk {
  service: string;
  domain: string;
  generation: number;
  keyVersion: number;
  errorCode: string | null;
  lostAt: number | null;
  /** A later run here resumed the key and got no answer either: stuck. False: the next run resumes it (a charged key replays free). */
  tried: boolean;
}

export interface Pruned {
  companies: number;
  lookups: number;
  purchases: number;
}

export type SpendBy = 'month' | 'person' | 'input';

/** Credits of the purchases one group closed, as the month's bill counts them: charged with an answer seen, and keys retired as possibly charged. */
export interface SpendRow {
  service: string;
  /** The month (YYYY-MM, UTC) the purchases closed in; user@host of the run that closed them; its input. Null: no run closed them (imported from enrich 0.1). */
  group: string | null;
  credits: number;
  /** Purchases closed with a record: companies bought. */
  bought: number;
  unconfirmed: number;
}

/** Money not yet counted as spent: purchases left open whose key may have been charged. */
export interface OpenSpend {
  service: string;
  /** Open purchases an attempt may have been sent under (a credit each at most). */
  purchases: number;
  /** Keys of open purchases already retired as possibly charged. */
  unconfirmed: number;
}

export interface Spend {
  rows: SpendRow[];
  open: OpenSpend[];
  /** Per service, the companies its closed purchases bought: a company bought ten times is one. */
  companies: { service: string; companies: number }[];
}

/** How runs may be judged alive: a note while a wait goes on, and the wait itself. */
export interface Watch {
  note(runs: number, forMs: number): void;
  sleep(ms: number): Promise<void>;
}

export interface LedgerStore extends JournalTarget {
  /** The store's address as it may be shown (a team store's without its password). */
  readonly shown: string;
  /** What `bytes` measures, after the figure (`in database enrich`), or '' for a file's size on disk. */
  readonly sizeNote: string;
  /** The files a store is made of (an export must not overwrite them); none for the team's. */
  readonly files: readonly string[];
  /** The store's clock (a team store's: its server's), which every age it keeps is measured by. */
  readonly now: () => number;
  /** Bytes the store takes: the file and its WAL on disk, or the team's database on its server. */
  size(): Promise<number>;
  holdings(): Promise<ServiceHoldings[]>;
  /** The most recent runs, newest first; credits summed from the purchases each closed. */
  runs(limit: number): Promise<RunRow[]>;
  /** Every record held, service by service, oldest first; a damaged row is passed over. */
  records(service: string | undefined): AsyncIterable<HeldRecord>;
  /** Purchases at risk (of `domains`, or all), never one a live run is buying right now. */
  atRisk(domains: readonly string[]): Promise<AtRisk[]>;
  /** Gives up on these purchases' keys (each re-checked in the transaction); how many were released. */
  release(purchases: readonly AtRisk[]): Promise<AtRisk[]>;
  /** Forgets records bought, lookups made and purchases closed before `cutoff`; open purchases are kept. */
  prune(cutoff: number, dryRun: boolean): Promise<Pruned>;
  spend(by: SpendBy): Promise<Spend>;
  /** This month's caps, and what is spent and held under each (store/budget.ts). */
  budget(): Promise<BudgetView>;
  /** Sets a monthly cap (person null: the store's), or removes it (credits null); `by` who set it. False: there was none to remove. */
  setBudget(person: string | null, credits: number | null, by: string): Promise<boolean>;
  /** Before runs are judged alive (release, prune): waits out what this host's clock cannot judge. */
  settleClocks(watch: Watch): Promise<void>;
  /** The store read whole, for `ledger copy`, as of one moment. */
  copySource(): Promise<CopySource>;
  /** The store as a copy's target; `dryRun`: each merge is decided as it would be, and nothing written. */
  copyTarget(dryRun: boolean): Promise<CopyTarget>;
  /** Names this very store (same file, same database): a store is never copied into itself. */
  identity(): Promise<string>;
  /** An error as a person should read it (damage the backend found, said as such). */
  explain(error: unknown): unknown;
  close(): Promise<void>;
}

/** How a ledger opens a store: to read, to write, and whether it may make one (an import, a copy's target). */
export interface LedgerOpen {
  tool: string;
  /** A clock for tests; by default the store's own. */
  now?: () => number;
  env: NodeJS.ProcessEnv;
  write: boolean;
  create: boolean;
}
