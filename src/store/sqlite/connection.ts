import type Database from 'libsql';
import { EnrichError } from '../../errors.js';
import { describeSqliteError } from './errors.js';

/** What store.ts, records.ts and writer.ts share about one open store, so nothing imports its way back to store.ts. */
export type Db = InstanceType<typeof Database>;

/** A run on another host whose heartbeat has not moved for this long is taken for dead. */
export const LEASE_MS = 45_000;

/** A prepared statement, as the store uses it (better-sqlite3's API, which libsql follows). */
export interface Statement {
  run(...params: unknown[]): { changes: number; lastInsertRowid: number | bigint };
  get(...params: unknown[]): unknown;
  all(...params: unknown[]): unknown[];
  iterate(...params: unknown[]): IterableIterator<unknown>;
  raw(on?: boolean): Statement;
}

/** One open store, as its records and writer use it. */
export interface Connection {
  readonly path: string;
  readonly db: Db;
  readonly storeId: string;
  readonly host: string;
  readonly options: { readonly tool: string; readonly now: () => number; readonly monotonic?: () => number };
  /** A prepared statement, compiled once per text. */
  sql(text: string): Statement;
  /** Whether a run may still be sending under the intents it owns (store.ts). */
  runAlive(run: number, now?: number): boolean;
  /** The store's id with its key epoch as it is now. */
  currentStoreId(): string;
}

/** The store cannot be written: every paid call stops, since none may go unrecorded. */
export class StoreWriteError extends EnrichError {
  override readonly name = 'StoreWriteError';
  constructor(path: string, cause: unknown) {
    super(`cannot write the store ${path} (${describeSqliteError(cause)}); no further paid call was made. Fix that, then run the same command to resume`, 'failure', { cause });
  }
}
