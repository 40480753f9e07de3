import type { CompanyRecord } from '../../api/types.js';

// The enrich 0.1 journal (JSON Lines, append-only: a header line, then events), kept only to import its purchases.

export interface InputIdentity {
  sha256: string;
  bytes: number;
  /** For messages only; the hash is what identifies the input. */
  name: string;
}

export interface HeaderEntry {
  t: 'header';
  format: number;
  run: string;
  created: string;
  tool: string;
  input: InputIdentity;
  /** The options that change results: which column holds the domains, and which service answers. */
  column: string;
  service: string;
}

/** One per invocation, so credits can be told apart per invocation. */
export interface SessionEntry {
  t: 'session';
  n: number;
  at: string;
  pid: number;
  dry_run: boolean;
}

export interface MatchEntry {
  t: 'match';
  d: string;
  s: 'hit' | 'miss' | 'error';
  /** hit: the canonical domain and name the service answered. */
  c?: string;
  n?: string;
  /** error: the problem code; final when asking again cannot help (422). */
  code?: string;
  final?: boolean;
}

/** Written and flushed to disk before the paid call it announces. */
export interface IntentEntry {
  t: 'intent';
  c: string;
  v: number;
  key: string;
}

export interface EnrichEntry {
  t: 'enrich';
  c: string;
  v: number;
  s: 'hit' | 'miss' | 'error';
  charged?: number;
  remaining?: number;
  company?: CompanyRecord;
  /** error: the problem code (network_error when no answer came), and the answer's requestId. */
  code?: string;
  rid?: string;
  /** error: "retired": no attempt under v can have been charged (the next takes v+1); "kept": one may have been, so retries reuse it. */
  key?: 'retired' | 'kept';
  /** error: asking again cannot help (422). */
  final?: boolean;
}

export type EventEntry = SessionEntry | MatchEntry | IntentEntry | EnrichEntry;
export type JournalEntry = HeaderEntry | EventEntry;
