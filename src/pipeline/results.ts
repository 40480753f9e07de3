import type { CompanyRecord } from '../api/types.js';
import type { Stop } from './execute.js';
import { invalidReasonOf } from './scan.js';
import { Match, type RecordRef, type RunState } from './state.js';

export type RowStatus = 'matched' | 'no_match' | 'invalid' | 'error' | 'skipped';

/** What the batch says about one input row; the writer turns it into columns. */
export interface RowResult {
  status: RowStatus;
  /** The problem code or reason behind invalid, error and skipped rows. */
  error: string | null;
  /** The canonical company domain and name, whenever the free match found one. */
  domain: string | null;
  name: string | null;
  company: CompanyRecord | null;
}

/** Answers about the account, not the company: rows they touch are skipped, not failed. */
const STOPPING_CODES = new Set(['invalid_token', 'insufficient_scope', 'insufficient_credits']);

function stopCode(stop: Stop | null): string | null {
  if (stop === null) return null;
  switch (stop.reason) {
    case 'credits':
      return 'insufficient_credits';
    case 'budget':
      return 'max_credits';
    case 'auth':
      return stop.code;
    case 'interrupted':
      return 'interrupted';
  }
}

const failed = (code: string, domain: string | null = null, name: string | null = null): RowResult =>
  STOPPING_CODES.has(code)
    ? { status: 'skipped', error: code, domain, name, company: null }
    : { status: 'error', error: code, domain, name, company: null };

/**
 * Maps a row reference from the scan to its result, from the state alone: a resumed run rebuilds
 * exactly the rows an uninterrupted one would have written. In a dry run a hit reads "matched"
 * with no record, since nothing was bought.
 */
export function resultForRow(
  ref: number,
  state: RunState,
  /** Null when only the status is wanted (counting), so no record is read. */
  readRecord: ((ref: RecordRef) => CompanyRecord) | null,
  options: { dryRun: boolean; stop: Stop | null },
): RowResult {
  const skipped = stopCode(options.stop);
  if (ref < 0) return { status: 'invalid', error: invalidReasonOf(ref), domain: null, name: null, company: null };
  switch (state.matchOf(ref)) {
    case Match.PENDING:
      return { status: 'skipped', error: skipped, domain: null, name: null, company: null };
    case Match.MISS:
      return { status: 'no_match', error: null, domain: null, name: null, company: null };
    case Match.ERROR:
      return failed(state.matchError(ref)?.code ?? 'error');
  }
  const company = state.companyOf(ref);
  if (company === undefined) return { status: 'error', error: 'internal', domain: null, name: null, company: null };
  const { domain, name } = company;
  if (options.dryRun && company.status !== 'hit') return { status: 'matched', error: null, domain, name, company: null };
  switch (company.status) {
    case 'hit':
      return { status: 'matched', error: null, domain, name, company: company.record === null || readRecord === null ? null : readRecord(company.record) };
    case 'miss':
      return { status: 'no_match', error: null, domain, name, company: null };
    case 'pending':
      return { status: 'skipped', error: skipped, domain, name, company: null };
    case 'error':
      return failed(company.errorCode ?? 'error', domain, name);
  }
}

/**
 * A key under which rows share one result, for a given state and stop: the invalid reason, the
 * domain's match outcome, or for a hit the company. Writers cache a row's formatted result under
 * it, so a company repeated on many rows is read from the journal and formatted once.
 */
export function resultKey(ref: number, state: RunState): string {
  if (ref < 0) return `i${ref}`;
  switch (state.matchOf(ref)) {
    case Match.PENDING:
      return 'p';
    case Match.MISS:
      return 'x';
    case Match.ERROR:
      return `e:${state.matchError(ref)?.code ?? 'error'}`;
  }
  return `c${state.companyOf(ref)?.index ?? -1}`;
}
