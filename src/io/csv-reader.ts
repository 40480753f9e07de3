import { createReadStream } from 'node:fs';
import { Parser, type Options } from 'csv-parse';
import { InputError } from '../errors.js';
import type { CsvFormat } from './csv-format.js';
import type { Utf8Check } from './utf8-check.js';

export type { CsvFormat } from './csv-format.js';
export { detectFormat, sniffDelimiter } from './csv-format.js';

/** Parsed records with where each sits: from the previous record's end (blank lines included) to its own line break's end. All-empty rows (spreadsheet padding) are dropped. */
export interface CsvBatch {
  records: string[][];
  starts: number[];
  ends: number[];
}

function parserOptions(format: CsvFormat): Options {
  return {
    bom: true,
    delimiter: format.delimiter,
    // Every row may end its own way (a line echoed onto a CRLF export, files joined with cat); auto-detection would take the first
    // line's for all and glue the others together. Changes bump SCAN_RULES (pipeline/scan-rules.ts).
    record_delimiter: ['\r\n', '\n', '\r'],
    // Real exports put stray quotes inside unquoted fields (Joe's "Bar"); that is not ambiguous.
    relax_quotes: true,
    // Column counts are checked by the reader, which drops short all-empty padding rows (",,") rather than refuse them.
    relax_column_count: true,
    skip_empty_lines: true,
  };
}

/** csv-parse taking each record as the parser hands it over, with no stream buffering or promise per record; its `info` counters say where it ended. */
class RangedParser extends Parser {
  constructor(
    options: Options,
    private readonly onRecord: (record: string[], end: number) => void,
  ) {
    super(options);
  }

  override push(chunk: unknown, encoding?: BufferEncoding): boolean {
    if (chunk === null) return super.push(null, encoding);
    this.onRecord(chunk as string[], this.info.bytes);
    return true;
  }
}

const allEmpty = (record: string[]): boolean => record.every((f) => f === '');

/** The 1-based line of a byte offset (CRLF, LF or a lone CR ends a line; `skipBlank` passes blank lines first); csv-parse's counter doubles a quoted CRLF. */
export async function lineAt(path: string, offset: number, skipBlank: boolean): Promise<number> {
  let line = 1;
  let pos = 0;
  // A break is counted at its last byte (the LF of a CRLF, or the byte after a lone CR), so an offset on a row's own break stays on its line.
  let afterCR = false;
  for await (const chunk of createReadStream(path, { highWaterMark: 256 * 1024 }) as AsyncIterable<Buffer>) {
    for (let i = 0; i < chunk.length; i++, pos++) {
      const byte = chunk[i] as number;
      if (afterCR && byte !== 0x0a) line++;
      afterCR = byte === 0x0d;
      if (pos >= offset && !(skipBlank && (byte === 0x0a || byte === 0x0d))) return line;
      if (byte === 0x0a) line++;
    }
  }
  return line;
}

async function describeCsvError(error: unknown, path: string, displayName: string): Promise<InputError> {
  const e = error as { code?: string; bytes?: number; message?: string };
  const bytes = e.bytes ?? 0;
  // The record ends at `bytes`, its line break included: the breaks before its last byte count the lines before its last line.
  const at = (): Promise<number> => lineAt(path, Math.max(0, bytes - 1), false);
  switch (e.code) {
    case 'CSV_RECORD_INCONSISTENT_FIELDS_LENGTH': {
      const m = /expect (\d+), got (\d+)/.exec(e.message ?? '');
      const detail = m === null ? 'has a different number of fields than the header' : `has ${m[2]} fields where the header has ${m[1]}`;
      return new InputError(`${displayName}:${await at()}: malformed CSV: the row ${detail}`, { cause: error });
    }
    case 'CSV_QUOTE_NOT_CLOSED':
      // `bytes` is where the last complete row ended: the unclosed quote is in the next row.
      return new InputError(`${displayName}:${await lineAt(path, bytes, true)}: malformed CSV: a quoted field in the row starting here is never closed`, { cause: error });
    case 'CSV_INVALID_CLOSING_QUOTE':
      return new InputError(`${displayName}:${await at()}: malformed CSV: unexpected character after a closing quote`, { cause: error });
    default:
      return new InputError(`${displayName}:${await at()}: malformed CSV: ${e.message ?? String(error)}`, { cause: error });
  }
}

/** Streams a CSV file's records, header included, a batch per chunk read; a malformed file fails naming the line. Every byte goes through `utf8`, if given. */
export async function* readCsv(path: string, displayName: string, format: CsvFormat, utf8?: Utf8Check): AsyncGenerator<CsvBatch> {
  let batch: CsvBatch = { records: [], starts: [], ends: [] };
  let lastEnd = 0;
  let width: number | undefined;
  let ragged: { code: string; bytes: number; message: string } | undefined;
  const parser = new RangedParser(
    parserOptions(format),
    (record, end) => {
      if (ragged !== undefined) return;
      if (!allEmpty(record)) {
        width ??= record.length;
        if (record.length !== width) {
          ragged = { code: 'CSV_RECORD_INCONSISTENT_FIELDS_LENGTH', bytes: end, message: `expect ${width}, got ${record.length}` };
          return;
        }
        batch.records.push(record);
        batch.starts.push(lastEnd);
        batch.ends.push(end);
      }
      lastEnd = end;
    },
  );
  // Errors are read from `parser.errored` right after each write; this only keeps them handled.
  parser.on('error', () => {});
  const fail = async (error: unknown): Promise<never> => {
    if ((error as { code?: string }).code?.startsWith('CSV_') === true) throw await describeCsvError(error, path, displayName);
    throw new InputError(`cannot read ${displayName}: ${(error as Error).message}`, { cause: error });
  };
  const source = createReadStream(path, { highWaterMark: 256 * 1024 });
  try {
    for await (const chunk of source as AsyncIterable<Buffer>) {
      utf8?.push(chunk);
      parser.write(chunk);
      if (parser.errored !== null) await fail(parser.errored);
      if (ragged !== undefined) await fail(ragged);
      if (batch.records.length > 0) {
        const full = batch;
        batch = { records: [], starts: [], ends: [] };
        yield full;
      }
    }
  } catch (error) {
    if (error instanceof InputError) throw error;
    await fail(error);
  } finally {
    source.destroy();
  }
  utf8?.end();
  // The last record may have no line break after it, and an unclosed quote shows only at the end.
  parser.end();
  await new Promise<void>((resolve) => {
    parser.once('error', () => resolve());
    parser.once('finish', () => resolve());
  });
  if (parser.errored !== null) await fail(parser.errored);
  if (ragged !== undefined) await fail(ragged);
  if (batch.records.length > 0) yield batch;
}
