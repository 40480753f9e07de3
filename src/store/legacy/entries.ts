import type { CompanyRecord } from '../../api/types.js';

/**
 * The journal of enrich 0.1, kept only so its purchases can be imported into the store.
 *
 * The journal is JSON Lines, append-only. The first line pins the run; every later line is an
 * event. Field names are short because a 1M-row run writes millions of them, but each is a word.
 */
export const JOURNAL_FORMAT = 1;

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
  /**
   * error: what the answer proves about key version v. "retired": no attempt under it can have
   * been charged, so the next attempt takes v+1. "kept": an attempt under it may have been
   * charged unseen, so every retry must reuse it until the service replays its outcome.
   */
  key?: 'retired' | 'kept';
  /** error: asking again cannot help (422). */
  final?: boolean;
}

export type EventEntry = SessionEntry | MatchEntry | IntentEntry | EnrichEntry;
export type JournalEntry = HeaderEntry | EventEntry;
