import { InputError } from '../errors.js';
import { findDomainColumn } from './columns.js';
import { normaliseDomain, type InvalidReason } from './normalise.js';
import type { RunState } from './state.js';
import { IntVector } from './vector.js';

export const INVALID_REASONS: readonly InvalidReason[] = ['empty', 'not_a_domain', 'ip_address', 'public_suffix', 'unknown_suffix'];

/**
 * What the scan learned about the input: the header, the domain column, and for each data row a
 * reference into the run state (a domain index >= 0, or -1 - k for invalid reason k).
 */
export interface ScanResult {
  header: string[];
  /** A single column of bare domains with no header row; the output gets a "domain" header. */
  headerless: boolean;
  columnIndex: number;
  rows: number;
  invalidRows: number;
  rowRefs: IntVector;
}

export const invalidRef = (reason: InvalidReason): number => -1 - INVALID_REASONS.indexOf(reason);
export const invalidReasonOf = (ref: number): InvalidReason => INVALID_REASONS[-1 - ref] as InvalidReason;

/**
 * The first pass over the input: validate the whole file (a malformed line stops the run before
 * anything is billed), normalise every value and register each registrable domain once.
 */
export async function scanRecords(records: AsyncIterable<string[]>, state: RunState, column: string | undefined): Promise<ScanResult> {
  const rowRefs = new IntVector(Int32Array, 4096);
  let header: string[] | undefined;
  let headerless = false;
  let columnIndex = 0;
  let invalidRows = 0;

  const add = (value: string): void => {
    const n = normaliseDomain(value);
    if (n.ok) rowRefs.push(state.addDomain(n.domain));
    else {
      invalidRows++;
      rowRefs.push(invalidRef(n.reason));
    }
  };

  for await (const record of records) {
    if (header === undefined) {
      header = record;
      try {
        columnIndex = findDomainColumn(header, column);
      } catch (error) {
        // `printf 'a.com\nb.io\n' | enrich -`: one column whose first value is itself a domain.
        const only = header[0];
        if (column === undefined && header.length === 1 && only !== undefined && normaliseDomain(only).ok) {
          headerless = true;
          columnIndex = 0;
          add(only);
          header = ['domain'];
          continue;
        }
        throw error;
      }
      continue;
    }
    // The reader refuses ragged rows, so every row has the column.
    add(record[columnIndex] ?? '');
  }
  if (header === undefined) throw new InputError('the input is empty: expected a header row and at least one row');
  return { header, headerless, columnIndex, rows: rowRefs.length, invalidRows, rowRefs };
}
