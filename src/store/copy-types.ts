import type { KeptPurchase } from './purchase.js';

/** The rows `enrich ledger copy` moves between stores of any backend: every table but meta (identity) and imports (one machine's paths). */

export interface CopyRun {
  /** The run's id in its own store: purchases and records name it; the target gives it one of its own. */
  id: number;
  startedAt: number;
  endedAt: number | null;
  pid: number;
  host: string;
  user: string | null;
  tool: string;
  inputName: string | null;
  inputSha256: string | null;
  rows: number | null;
  dryRun: boolean;
  options: string | null;
  status: string;
  heartbeatAt: number | null;
  policyNow: number | null;
  credits: number;
  bought: number;
  reused: number;
}

export interface CopyLookup {
  domain: string;
  status: 'hit' | 'miss';
  company: string | null;
  name: string | null;
  checkedAt: number;
}

export interface CopyCompany {
  domain: string;
  name: string;
  /** The JSON the service returned, as kept. */
  record: string;
  boughtAt: number;
  lastUpdated: string | null;
  idempotencyKey: string | null;
  credits: number;
  generation: number;
  run: number | null;
}

/** A store read whole as of one moment (a snapshot), service by service, in chunks. */
export interface CopySource {
  services(): Promise<string[]>;
  runs(service: string): Promise<CopyRun[]>;
  lookups(service: string): AsyncIterable<CopyLookup[]>;
  companies(service: string): AsyncIterable<CopyCompany[]>;
  purchases(service: string): AsyncIterable<KeptPurchase[]>;
  end(): Promise<void>;
}

/** Source run id -> the target's id for the same run. */
export type RunIds = ReadonlyMap<number, number>;

/** What one chunk of purchases did to the target (store/copy.ts purchaseMove). */
export interface PurchasesCopied {
  /** Closed purchases the target did not have (or had left open): their credits now count there. */
  closed: number;
  /** Open purchases the target did not have: kept open under their own keys. */
  open: number;
  credits: number;
  unconfirmed: number;
  /** Closed in both stores, differently: the target's is kept, the source's credits are not added. */
  conflicts: number;
  conflictCredits: number;
  /** Open in the target and held by a live run there: left to that run. */
  busy: number;
  /** Open in both under different keys, each possibly charged: the target keeps its own (copy.ts). */
  unsettled: number;
}

/** A store receiving a copy. Each call is one idempotent transaction that reads the chunk's keys, asks copy.ts, and writes the answer. */
export interface CopyTarget {
  runs(service: string, runs: readonly CopyRun[]): Promise<{ ids: RunIds; added: number }>;
  lookups(service: string, rows: readonly CopyLookup[]): Promise<number>;
  companies(service: string, rows: readonly CopyCompany[], ids: RunIds): Promise<number>;
  purchases(service: string, rows: readonly KeptPurchase[], ids: RunIds): Promise<PurchasesCopied>;
  /** Done: what the copy held (the team store's maintenance lock) is let go. */
  end(): Promise<void>;
}
