import { createWriteStream, type WriteStream } from 'node:fs';
import { readdir, rename, rm } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { once } from 'node:events';
import { randomBytes } from 'node:crypto';
import { stringify, type Stringifier } from 'csv-stringify';
import type { CompanyRecord } from '../api/types.js';
import type { RowResult } from '../pipeline/results.js';
import { isProcessAlive } from '../process-alive.js';

export type OutputFormat = 'csv' | 'jsonl';

/** The columns every output row gains, after the input's own (README "Output columns"). */
export const RESULT_COLUMNS = [
  'enrich_status',
  'enrich_error',
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

function resultValues(r: RowResult): Value[] {
  const c = r.company;
  return [r.status, r.error, r.domain, c?.name ?? r.name, ...RECORD_FIELDS.map((f) => (c === null ? null : c[f]))];
}

const csvCell = (v: Value): string => (v === null ? '' : Array.isArray(v) ? v.join('; ') : String(v));

export interface ResultWriter {
  write(fields: readonly string[], result: RowResult): Promise<void>;
  /** Completes the output; for a file, only now does it appear under its name. */
  finish(): Promise<void>;
  /** Drops a file output that was never finished. */
  abort(): Promise<void>;
}

export interface OutputOptions {
  /** A path, or "-" for stdout. */
  destination: string;
  format: OutputFormat;
  header: readonly string[];
  stdout: NodeJS.WritableStream;
  /** Mirror the input's byte-order mark, so a spreadsheet that needed it still reads the output. */
  bom: boolean;
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

/** Hidden, and named after the output, so an unfinished file never passes for the real one. */
const tempPrefix = (destination: string): string => `.${basename(destination)}.enrich-tmp-`;

/** Temp files left by runs killed mid-write (kill -9 skips every cleanup) go once a run finishes. */
async function removeOrphans(destination: string): Promise<void> {
  const prefix = tempPrefix(destination);
  const dir = dirname(destination);
  for (const name of await readdir(dir).catch(() => [] as string[])) {
    if (!name.startsWith(prefix)) continue;
    const pid = Number(name.slice(prefix.length).split('-')[0]);
    if (Number.isInteger(pid) && pid !== process.pid && !isProcessAlive(pid)) await rm(join(dir, name), { force: true });
  }
}

/**
 * Streams result rows as CSV or JSONL with backpressure. A file is written to a private temp
 * file beside it and renamed into place at the end, so a crash never leaves a half-written
 * output that looks finished.
 */
export async function openResultWriter(options: OutputOptions): Promise<ResultWriter> {
  const toFile = options.destination !== '-';
  const tempPath = toFile ? join(dirname(options.destination), `${tempPrefix(options.destination)}${process.pid}-${randomBytes(4).toString('hex')}`) : '';
  const sink: NodeJS.WritableStream = toFile ? createWriteStream(tempPath, { mode: 0o600 }) : options.stdout;
  if (toFile) await once(sink as WriteStream, 'open');

  const push = async (chunk: string): Promise<void> => {
    if (!sink.write(chunk)) await once(sink, 'drain');
  };

  let csv: Stringifier | null = null;
  const keys = jsonKeys(options.header);
  if (options.bom && options.format === 'csv') await push('\ufeff');
  if (options.format === 'csv') {
    csv = stringify({ eof: true });
    csv.pipe(sink, { end: false });
    csv.write([...options.header, ...RESULT_COLUMNS]);
  }

  const writeCsv = async (row: string[]): Promise<void> => {
    const stringifier = csv as Stringifier;
    if (!stringifier.write(row)) await once(stringifier, 'drain');
  };

  const endSink = async (): Promise<void> => {
    if (toFile) {
      (sink as WriteStream).end();
      await once(sink as WriteStream, 'finish');
    }
  };

  return {
    async write(fields, result) {
      const values = resultValues(result);
      if (csv !== null) {
        await writeCsv([...fields, ...values.map(csvCell)]);
        return;
      }
      const obj: Record<string, Value> = {};
      fields.forEach((f, i) => (obj[keys[i] as string] = f));
      values.forEach((v, i) => (obj[keys[fields.length + i] as string] = v));
      await push(`${JSON.stringify(obj)}\n`);
    },
    async finish() {
      if (csv !== null) {
        const ended = once(csv, 'end');
        csv.end();
        await ended;
      }
      await endSink();
      if (toFile) {
        await rename(tempPath, options.destination);
        await removeOrphans(options.destination);
      }
    },
    async abort() {
      if (!toFile) return;
      (sink as WriteStream).destroy();
      await rm(tempPath, { force: true });
    },
  };
}
