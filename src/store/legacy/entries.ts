import type { CompanyRecord } from '../../api/types.js';

// The enrich 0.1 journal (JSON Lines, append-only: a header line, then events), kept only to import its purchases: the fields the import reads.

export interface HeaderEntry {
  t: 'header';
  created: string;
  service: string;
}

/** One per invocation: the moment its events are dated at. */
export interface SessionEntry {
  t: 'session';
  at: string;
}

export interface MatchEntry {
  t: 'match';
  d: string;
  s: 'hit' | 'miss' | 'error';
  /** hit: the canonical domain and name the service answered. */
  c?: string;
  n?: string;
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
  company?: CompanyRecord;
  /** error: the problem code (network_error when no answer came). */
  code?: string;
  /** error: "retired": no attempt under v can have been charged (the next takes v+1); "kept": one may have been, so retries reuse it. */
  key?: 'retired' | 'kept';
  /** error: asking again cannot help (422). */
  final?: boolean;
}

export type JournalEntry = HeaderEntry | SessionEntry | MatchEntry | IntentEntry | EnrichEntry;
