import { createReadStream } from 'node:fs';
import type { CompanyRecord } from '../api/types.js';
import type { RowResult } from '../pipeline/results.js';
import type { IntVector } from '../pipeline/vector.js';
import type { CsvFormat } from './csv-format.js';
import { neutraliseCell, stripControls } from './service-text.js';
import type { Sink } from './sink.js';
import { encodeWindows1252 } from './windows-1252.js';

export type OutputFormat = 'csv' | 'jsonl';

/** The columns every output row gains, after the input's own (README "Output"). */
export const RESULT_COLUMNS = [
  'enrich_status',
  'enrich_error',
  'enrich_source',
  'enrich_bought_at',
  'company_domain',
  'company_name',
  'company_website_url',
  'company_description',
  'company_industry',
  'company_employee_count',
  'company_revenue_range',
  'company_ownership_type',
  'company_year_founded',
  'company_specialties',
  'company_hq_country',
  'company_hq_city',
  'company_last_updated',
] as const;

const RECORD_FIELDS = [
  'website_url',
  'description',
  'industry',
  'employee_count',
  'revenue_range',
  'ownership_type',
  'year_founded',
  'specialties',
  'hq_country',
  'hq_city',
  'last_updated',
] as const satisfies readonly (keyof CompanyRecord)[];

type Value = string | number | string[] | null;

export interface ResultTextOptions {
  /** Write the service's text exactly as it came (`--raw-service-text`): no formula neutralised, no control stripped. */
  raw?: boolean;
}

/** The result columns' values; all but enrich_status can carry the service's text (the error is its problem code). */
function resultValues(r: RowResult): Value[] {
  const c = r.company;
  // No company: [] for specialties, not null, so each key keeps one JSON type (`jq '.company_specialties[]'`).
  return [r.status, r.error, r.source, r.boughtAt, r.domain, c?.name ?? r.name, ...RECORD_FIELDS.map((f) => (c !== null ? c[f] : f === 'specialties' ? [] : null))];
}

const csvCell = (v: Value): string => (v === null ? '' : Array.isArray(v) ? v.join('; ') : String(v));

/** Numbers stay numbers (a negative count is not a formula); text goes through `clean`. */
const cleanValue = (v: Value, clean: (s: string) => string): Value =>
  typeof v === 'string' ? clean(v) : Array.isArray(v) ? v.map(clean) : v;

/**
 * One RFC 4180 field: quoted when it holds the delimiter, a quote, or any line break (a lone CR or LF too, whatever the file's line end),
 * quotes doubled. By hand, as csv-stringify's sync call rebuilds a stringifier per row; test/unit/csv-suffix.test.ts holds it to csv-stringify.
 */
function csvField(value: string, delimiter: string): string {
  if (value.includes('"')) return `"${value.replaceAll('"', '""')}"`;
  return value.includes(delimiter) || value.includes('\n') || value.includes('\r') ? `"${value}"` : value;
}

/** What follows a row's own bytes: a delimiter, the result columns and the line break, in the input's dialect. */
export function csvSuffix(values: readonly string[], format: CsvFormat): string {
  let text = '';
  for (const value of values) text += format.delimiter + csvField(value, format.delimiter);
  return text + format.lineEnd;
}

/** In the input's encoding: UTF-8, or Windows-1252 when the input is not UTF-8 (one encoding per file). */
export function csvResultSuffix(result: RowResult, format: CsvFormat, options: ResultTextOptions = {}): Buffer {
  const values = resultValues(result);
  // enrich_status (index 0) is ours and numbers are numbers; a joined specialties cell is judged as one cell.
  const cells = options.raw === true ? values.map(csvCell) : values.map((v, i) => (i === 0 || typeof v === 'number' ? csvCell(v) : neutraliseCell(csvCell(v))));
  const text = csvSuffix(cells, format);
  return format.utf8 ? Buffer.from(text) : encodeWindows1252(text);
}

export interface CopyOptions {
  inputPath: string;
  sink: Sink;
  format: CsvFormat;
  header: readonly string[];
  headerRange: { start: number; end: number } | null;
  rows: number;
  rowEnds: IntVector;
  /** Starts that are not the previous row's end (see ScanResult). */
  rowStarts: ReadonlyMap<number, number>;
  /** The result columns for data row i, as `csvResultSuffix` makes them (callers cache them). */
  suffix(row: number): Buffer;
  /** Awaited before data rows [from, to) are asked for (the store's records are read a window at a time). */
  prepare(from: number, to: number): Promise<void>;
  /** Checked between chunks; throwing from it stops the copy. */
  checkpoint(): void;
}

/** Rows whose results are made (and records read) at a time, and how much output gathers before a write: bounds the output phase's peak memory. */
export const ROW_WINDOW = 2048;
const EMIT_BYTES = 256 * 1024;

const CR = 0x0d;
const LF = 0x0a;
const BOM = Buffer.from([0xef, 0xbb, 0xbf]);

/** A row's bytes without blank lines before it or its line break; a BOM is dropped only at the file's start (a row may begin with U+FEFF). */
function rowBytes(buf: Buffer, from: number, to: number, atFileStart: boolean): Buffer {
  let a = from;
  let b = to;
  if (atFileStart && buf.subarray(a, a + 3).equals(BOM)) a += 3;
  while (a < b && (buf[a] === CR || buf[a] === LF)) a++;
  while (b > a && (buf[b - 1] === LF || buf[b - 1] === CR)) b--;
  return buf.subarray(a, b);
}

/** CSV results: every input row copied byte for byte (quoting, spacing, encoding), then the result columns; the scan recorded where rows lie. */
export async function copyCsvWithResults(o: CopyOptions): Promise<void> {
  const parts: Buffer[] = [];
  let size = 0;
  const emit = async (force: boolean): Promise<void> => {
    if (size === 0 || (!force && size < EMIT_BYTES)) return;
    const chunk = parts.length === 1 ? (parts[0] as Buffer) : Buffer.concat(parts, size);
    parts.length = 0;
    size = 0;
    await o.sink.write(chunk);
  };
  const add = (b: Buffer): void => {
    parts.push(b);
    size += b.length;
  };

  if (o.format.bom) add(Buffer.from(BOM));
  const headerSuffix = Buffer.from(csvSuffix(RESULT_COLUMNS, o.format));
  if (o.headerRange === null) {
    add(Buffer.from(o.header.map((name) => csvField(name, o.format.delimiter)).join(o.format.delimiter)));
    add(headerSuffix);
  }

  let pending: Buffer = Buffer.alloc(0);
  let pendingStart = 0; // file offset of pending[0]
  let row = 0;
  let headerDone = o.headerRange === null;
  const startOf = (i: number): number => o.rowStarts.get(i) ?? (i === 0 ? (o.headerRange?.end ?? 0) : o.rowEnds.get(i - 1));
  for await (const chunk of createReadStream(o.inputPath, { highWaterMark: 1024 * 1024 }) as AsyncIterable<Buffer>) {
    o.checkpoint();
    pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
    const available = pendingStart + pending.length;
    if (!headerDone && o.headerRange !== null && o.headerRange.end <= available) {
      add(rowBytes(pending, o.headerRange.start - pendingStart, o.headerRange.end - pendingStart, o.headerRange.start === 0));
      add(headerSuffix);
      headerDone = true;
    }
    let end = row;
    while (headerDone && end < o.rows && o.rowEnds.get(end) <= available) end++;
    // A window of rows at a time: their records, and the output they make, are all that is held.
    while (row < end) {
      const to = Math.min(end, row + ROW_WINDOW);
      await o.prepare(row, to);
      for (; row < to; row++) {
        // A view, not a copy: `pending` is replaced, never overwritten, so it stays valid until the next emit.
        const start = startOf(row);
        add(rowBytes(pending, start - pendingStart, o.rowEnds.get(row) - pendingStart, start === 0));
        add(o.suffix(row));
      }
      await emit(false);
    }
    const keepFrom = row < o.rows ? startOf(row) : available;
    if (headerDone && keepFrom > pendingStart) {
      pending = pending.subarray(keepFrom - pendingStart);
      pendingStart = keepFrom;
    }
    await emit(false);
  }
  if (row !== o.rows) throw new Error(`the input changed while results were written (${row} of ${o.rows} rows found)`);
  await emit(true);
}

/** JSONL keys: the input's headers, made unique, then the result columns. */
function jsonKeys(header: readonly string[]): string[] {
  const seen = new Set<string>();
  const unique = (name: string): string => {
    let key = name;
    for (let n = 2; seen.has(key); n++) key = `${name}_${n}`;
    seen.add(key);
    return key;
  };
  return [...header.map((h) => unique(h)), ...RESULT_COLUMNS.map((c) => unique(c))];
}

/** `"key":` per key. JSONL rows are built as text, not objects: an input column named `__proto__` would set the prototype and vanish. */
const keyPrefixes = (keys: readonly string[]): string[] => keys.map((k) => `${JSON.stringify(k)}:`);

/** The result part of a JSONL row (no braces), with the keys this header gives the result columns. */
export function jsonlResultFormatter(header: readonly string[], options: ResultTextOptions = {}): (result: RowResult) => string {
  const prefixes = keyPrefixes(jsonKeys(header).slice(header.length));
  return (result) => {
    const values = resultValues(result);
    // JSON escapes controls, but a reader that prints the value gets the raw bytes back.
    const clean = options.raw === true ? values : values.map((v, i) => (i === 0 ? v : cleanValue(v, stripControls)));
    return clean.map((v, i) => `${prefixes[i] as string}${JSON.stringify(v)}`).join(',');
  };
}

export interface JsonlOptions {
  inputPath: string;
  displayName: string;
  sink: Sink;
  format: CsvFormat;
  header: readonly string[];
  headerless: boolean;
  /** The result part of data row i, as `jsonlResultFormatter` makes it (callers cache it). */
  result(row: number): string;
  /** Awaited before data rows [from, to) are asked for. */
  prepare(from: number, to: number): Promise<void>;
  checkpoint(): void;
}

/** The input part of a JSONL row; a field beyond the header is keyed by its column number (`_7`). */
function inputFields(record: readonly string[], prefixes: readonly string[]): string {
  let out = '';
  for (let j = 0; j < record.length; j++) {
    out += `${j === 0 ? '' : ','}${prefixes[j] ?? `"_${j + 1}":`}${JSON.stringify(record[j])}`;
  }
  return out;
}

/** JSONL results: per row, the input's columns by (unique) header name, then the result columns with their JSON types. */
export async function writeJsonlResults(o: JsonlOptions): Promise<void> {
  const prefixes = keyPrefixes(jsonKeys(o.header).slice(0, o.header.length));
  let row = 0;
  let first = !o.headerless;
  // JSONL needs the input's fields: the parser loads only for it (a CSV result copies bytes).
  const { readCsv } = await import('./csv-reader.js');
  for await (const { records } of readCsv(o.inputPath, o.displayName, o.format)) {
    o.checkpoint();
    // A window of rows at a time, as for CSV (ROW_WINDOW).
    for (let i = first ? 1 : 0; i < records.length; ) {
      const to = Math.min(records.length, i + ROW_WINDOW);
      await o.prepare(row, row + to - i);
      const lines: string[] = [];
      for (; i < to; i++) {
        const fields = inputFields(records[i] as string[], prefixes);
        lines.push(`{${fields}${fields === '' ? '' : ','}${o.result(row++)}}\n`);
      }
      await o.sink.write(lines.join(''));
    }
    first = false;
  }
}
