import { createReadStream } from 'node:fs';
import { Parser, type Options } from 'csv-parse';
import { InputError } from '../errors.js';
import type { CsvFormat } from './csv-format.js';
import type { Utf8Check } from './utf8-check.js';

export type { CsvFormat } from './csv-format.js';
export { detectFormat, sniffDelimiter } from './csv-format.js';

/**
 * Records as parsed, with where each sits in the file: from the end of the previous record (so
 * blank lines before it are included) to the end of its own line break. Rows whose every field
 * is empty are dropped here, as spreadsheets pad exports with them.
 */
export interface CsvBatch {
  records: string[][];
  starts: number[];
  ends: number[];
}

function parserOptions(format: CsvFormat): Options {
  return {
    bom: true,
    delimiter: format.delimiter,
    // Every row may end its own way: a line appended to a CRLF export with `echo`, or files
    // joined with cat, mix them. (Auto-detection would take the first line's ending for all, and
    // glue the rows ending otherwise into their neighbours.) Quoted line breaks stay in their field.
    // A change to how rows are split moves SCAN_RULES on (pipeline/scan-rules.ts).
    record_delimiter: ['\r\n', '\n', '\r'],
    // Real exports put stray quotes inside unquoted fields (Joe's "Bar"); that is not ambiguous.
    relax_quotes: true,
    // Column counts are checked by the reader, which must drop short all-empty padding rows
    // (",,") rather than refuse them.
    relax_column_count: true,
    skip_empty_lines: true,
  };
}

/**
 * csv-parse's stream, taking each record as the parser hands it over instead of through the
 * object stream: no stream buffering, promise or microtask per record. At that moment the
 * parser's documented live counters (`info`) say where the record ended, its line break
 * included. (on_record's context says the same, but builds two objects per record to say it.)
 */
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

/**
 * The 1-based line of a byte offset, counting the line breaks before it: CRLF, LF and a lone CR
 * each end a line, as rows may (see parserOptions). With `skipBlank`, blank lines at the offset
 * are passed first (a row "starts" at its first character). csv-parse's own line counter counts
 * a CRLF inside a quoted field twice, so messages use this instead.
 */
export async function lineAt(path: string, offset: number, skipBlank: boolean): Promise<number> {
  let line = 1;
  let pos = 0;
  // A break is counted at its last byte: the LF of a CRLF, or the byte after a lone CR shows it
  // was one. (An offset on a row's own line break is then still on the row's line.)
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
  // The record ends at `bytes`, its line break included: the LFs before its last byte count the
  // lines before the record's last line (at the end of a file with no final break, the same).
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

/**
 * Streams the records of a CSV file, header included, in bounded memory: one batch per chunk
 * read. A malformed file fails with an InputError naming the line. Every byte read goes through
 * `utf8`, if given, which says after the last batch whether the whole file was UTF-8.
 */
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
