import { InputError } from '../errors.js';
import { findDomainColumn } from './columns.js';
import { invalidRef } from './invalid.js';
import { normaliseDomain } from './normalise.js';
import type { RunState } from './state.js';
import { IntVector } from './vector.js';


/** What the scan learned: the header, the domain column, and per data row a reference into the run state (a domain index >= 0, or -1 - k for invalid reason k). */
export interface ScanResult {
  header: string[];
  /** A single column of bare domains with no header row; the output gets a "domain" header. */
  headerless: boolean;
  columnIndex: number;
  rows: number;
  invalidRows: number;
  rowRefs: IntVector;
  /** Where each row sits in the file, to copy it byte for byte: it ends at rowEnds[i] and starts where the previous ended, except after a dropped all-empty row (rowStarts). */
  rowEnds: IntVector;
  rowStarts: Map<number, number>;
  /** Where the header row sits; null for a headerless input. */
  headerRange: { start: number; end: number } | null;
  /** The offset of the first non-UTF-8 byte in an input detected (from its first 64 KiB) as UTF-8; else null. */
  notUtf8At: number | null;
}

/** A batch of parsed records with their byte ranges (see io/csv-reader). */
export interface RecordBatch {
  records: string[][];
  starts: number[];
  ends: number[];
}


/** The first pass: validates the whole file (a malformed line stops the run before anything is billed) and registers each registrable domain once. */
export async function scanRecords(
  batches: AsyncIterable<RecordBatch>,
  state: RunState,
  column: string | undefined,
  /** The input's size: sizes the row arrays from the first batch's rows, once. */
  inputBytes = 0,
): Promise<ScanResult> {
  const rowRefs = new IntVector(Int32Array, 4096);
  // Byte offsets fit 32 bits below 4 GiB: half the memory of doubles for the common case.
  const rowEnds = new IntVector(inputBytes < 2 ** 32 ? Uint32Array : Float64Array, 4096);
  let sized = false;
  const rowStarts = new Map<number, number>();
  let lastEnd = 0;
  let headerRange: ScanResult['headerRange'] = null;
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

  for await (const { records, starts, ends } of batches) {
    let i = 0;
    const last = ends[ends.length - 1];
    if (!sized && last !== undefined && records.length > 1) {
      // Rows are much alike in an export: the first batch's average predicts the count well.
      sized = true;
      const estimate = Math.ceil((inputBytes / (last / records.length)) * 1.05) + 16;
      rowRefs.reserve(estimate);
      rowEnds.reserve(estimate);
    }
    if (header === undefined) {
      const first = records[0];
      if (first === undefined) continue;
      header = first;
      try {
        columnIndex = findDomainColumn(header, column);
        headerRange = { start: starts[0] as number, end: ends[0] as number };
        lastEnd = headerRange.end;
        i = 1;
      } catch (error) {
        // `printf 'a.com\nb.io\n' | enrich -`: one column whose first value is itself a domain.
        const only = header[0];
        if (header.length === 1 && only !== undefined && normaliseDomain(only).ok) {
          headerless = true;
          columnIndex = 0;
          header = [column ?? 'domain'];
        } else {
          throw error;
        }
      }
    }
    // The reader refuses ragged rows, so every row has the column.
    for (; i < records.length; i++) {
      add((records[i] as string[])[columnIndex] ?? '');
      const start = starts[i] as number;
      if (start !== lastEnd) rowStarts.set(rowEnds.length, start);
      lastEnd = ends[i] as number;
      rowEnds.push(lastEnd);
    }
  }
  if (header === undefined) throw new InputError('the input is empty: expected a header row (or a list of domains)');
  return { header, headerless, columnIndex, rows: rowRefs.length, invalidRows, rowRefs, rowStarts, rowEnds, headerRange, notUtf8At: null };
}
