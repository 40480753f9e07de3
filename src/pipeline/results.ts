import type { CompanyRecord } from '../api/types.js';
import type { Stop } from './stops.js';
import { invalidReasonOf } from './invalid.js';
import { Match, type Company, type RunState } from './state.js';

/** `found`: a dry run's match whose record was not bought (a real run would buy it). */
export type RowStatus = 'matched' | 'found' | 'no_match' | 'invalid' | 'error' | 'skipped';

/** What the batch says about one input row; the writer turns it into columns. */
export interface RowResult {
  status: RowStatus;
  /** The problem code or reason behind invalid, error and skipped rows. */
  error: string | null;
  /** The canonical company domain and name, whenever the free match found one. */
  domain: string | null;
  name: string | null;
  company: CompanyRecord | null;
  /** Bought by this run or reused from the store; `repeat` on a company's later rows (spend and reuse count on its first row only). */
  source: 'bought' | 'store' | 'repeat' | null;
  /** When the record shown was bought, ISO 8601. */
  boughtAt: string | null;
}

const NONE = { domain: null, name: null, company: null, source: null, boughtAt: null } as const;

/** Answers about the account, not the company: rows they touch are skipped, not failed. */
const STOPPING_CODES = new Set(['invalid_token', 'insufficient_scope', 'insufficient_credits', 'service_unavailable']);

function stopCode(stop: Stop | null): string | null {
  if (stop === null) return null;
  switch (stop.reason) {
    case 'credits':
      return 'insufficient_credits';
    case 'budget':
      return 'max_credits';
    case 'monthly':
      return 'monthly_budget';
    case 'auth':
      return stop.code;
    case 'interrupted':
      return 'interrupted';
    case 'unavailable':
      return 'service_unavailable';
  }
}

const failed = (code: string): RowResult => ({ ...NONE, status: STOPPING_CODES.has(code) ? 'skipped' : 'error', error: code });

const iso = (ms: number | null): string | null => (ms === null ? null : new Date(ms).toISOString());

/** Whether a company's row shows a record: one is held (a failed refresh still shows the older one). */
export const showsRecord = (c: Company): boolean => c.status === 'hit' || (c.boughtAt !== null && c.status !== 'miss');

/** The company a row reference names, if its match found one. */
export function rowCompany(ref: number, state: RunState): Company | undefined {
  return ref >= 0 && state.matchOf(ref) === Match.HIT ? state.companyOf(ref) : undefined;
}

/** A company's row: its record when one is held (a failed refresh still shows the older one). */
function companyResult(c: Company, status: RowStatus, error: string | null, readRecord: ((domain: string) => CompanyRecord | null) | null): RowResult {
  const held = showsRecord(c);
  const company = held && readRecord !== null ? readRecord(c.domain) : null;
  const source = held ? (c.status === 'hit' && c.source === 'bought' ? 'bought' : 'store') : null;
  return { status, error, domain: c.domain, name: c.name, company, source, boughtAt: held ? iso(c.boughtAt) : null };
}

/** A row's result from the state alone, so a resumed run writes exactly the rows an uninterrupted one would; a dry run's would-buy reads "found". */
export function resultForRow(
  ref: number,
  state: RunState,
  /** Null when only the status is wanted (counting), so no record is read. */
  readRecord: ((domain: string) => CompanyRecord | null) | null,
  options: { dryRun: boolean; stop: Stop | null },
): RowResult {
  const skipped = stopCode(options.stop);
  if (ref < 0) return { ...NONE, status: 'invalid', error: invalidReasonOf(ref) };
  switch (state.matchOf(ref)) {
    case Match.PENDING:
      return { ...NONE, status: 'skipped', error: skipped };
    case Match.MISS:
      return { ...NONE, status: 'no_match', error: null };
    case Match.ERROR:
      return failed(state.matchError(ref)?.code ?? 'error');
  }
  const company = state.companyOf(ref);
  if (company === undefined) return { ...NONE, status: 'error', error: 'internal' };
  // A dry run buys nothing: a company it would buy reads "found" (the match found it, no record).
  if (options.dryRun && company.status === 'pending') return companyResult(company, 'found', null, readRecord);
  switch (company.status) {
    case 'hit':
      return companyResult(company, 'matched', null, readRecord);
    case 'miss':
      return { ...NONE, status: 'no_match', error: null, domain: company.domain, name: company.name };
    case 'pending':
      return companyResult(company, 'skipped', skipped, readRecord);
    case 'error': {
      const code = company.errorCode ?? 'error';
      return companyResult(company, STOPPING_CODES.has(code) ? 'skipped' : 'error', code, readRecord);
    }
  }
}

/** A key under which rows share one result, so a company repeated on many rows is read from the store and formatted once. */
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
