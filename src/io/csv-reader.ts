import { createReadStream } from 'node:fs';
import { open } from 'node:fs/promises';
import { parse, type Options } from 'csv-parse';
import { InputError } from '../errors.js';

export interface CsvRecord {
  fields: string[];
  /** 1-based line on which the record ends (quoted newlines make records span lines). */
  line: number;
}

export interface CsvFormat {
  delimiter: string;
  /** The file starts with a UTF-8 byte-order mark (spreadsheet exports do). */
  bom: boolean;
}

const DELIMITERS = [',', ';', '\t', '|'] as const;

/**
 * Picks the delimiter from the header line: the candidate that occurs most outside quotes.
 * European spreadsheets export `;`, some tools tab; a header without any of them is one column.
 */
export function sniffDelimiter(firstLine: string): string {
  let best = ',';
  let bestCount = 0;
  for (const d of DELIMITERS) {
    let count = 0;
    let quoted = false;
    for (const ch of firstLine) {
      if (ch === '"') quoted = !quoted;
      else if (ch === d && !quoted) count++;
    }
    if (count > bestCount) {
      best = d;
      bestCount = count;
    }
  }
  return best;
}

/** Reads the head of the file to refuse encodings we cannot read and to find the delimiter. */
export async function detectFormat(path: string, displayName: string): Promise<CsvFormat> {
  const handle = await open(path, 'r');
  try {
    const buf = Buffer.alloc(64 * 1024);
    const { bytesRead } = await handle.read(buf, 0, buf.length, 0);
    const head = buf.subarray(0, bytesRead);
    if ((head[0] === 0xff && head[1] === 0xfe) || (head[0] === 0xfe && head[1] === 0xff)) {
      throw new InputError(`${displayName} is UTF-16 encoded; save it as UTF-8 CSV and run again`);
    }
    if (head.includes(0)) throw new InputError(`${displayName} is not a text file (it contains NUL bytes)`);
    let text = head.toString('utf8');
    const bom = text.charCodeAt(0) === 0xfeff;
    if (bom) text = text.slice(1);
    const end = text.search(/\r?\n/);
    return { delimiter: sniffDelimiter(end === -1 ? text : text.slice(0, end)), bom };
  } finally {
    await handle.close();
  }
}

function parserOptions(format: CsvFormat): Options {
  return {
    bom: true,
    delimiter: format.delimiter,
    info: true,
    // Real exports put stray quotes inside unquoted fields (Joe's "Bar"); that is not ambiguous.
    relax_quotes: true,
    relax_column_count: false,
    skip_empty_lines: true,
    skip_records_with_empty_values: true,
  };
}

function describeCsvError(error: unknown, displayName: string, lastLine: number): InputError {
  const e = error as { code?: string; lines?: number; message?: string };
  const line = e.lines ?? lastLine + 1;
  switch (e.code) {
    case 'CSV_RECORD_INCONSISTENT_FIELDS_LENGTH': {
      const m = /expect (\d+), got (\d+)/.exec(e.message ?? '');
      const detail = m === null ? 'has a different number of fields than the header' : `has ${m[2]} fields where the header has ${m[1]}`;
      return new InputError(`${displayName}:${line}: malformed CSV: the row ${detail}`, { cause: error });
    }
    case 'CSV_QUOTE_NOT_CLOSED':
      return new InputError(`${displayName}:${lastLine + 1}: malformed CSV: a quoted field opened here is never closed`, { cause: error });
    case 'CSV_INVALID_CLOSING_QUOTE':
      return new InputError(`${displayName}:${line}: malformed CSV: unexpected character after a closing quote`, { cause: error });
    default:
      return new InputError(`${displayName}:${line}: malformed CSV: ${e.message ?? String(error)}`, { cause: error });
  }
}

/**
 * Streams the records of a CSV file, header included, in bounded memory. A malformed file
 * fails with an InputError that names the line; `onChunk` sees every raw byte (for hashing).
 */
export async function* readCsv(
  path: string,
  displayName: string,
  format: CsvFormat,
  onChunk?: (chunk: Buffer) => void,
): AsyncGenerator<CsvRecord> {
  const source = createReadStream(path, { highWaterMark: 256 * 1024 });
  if (onChunk !== undefined) source.on('data', (chunk) => onChunk(chunk as Buffer));
  const parser = source.pipe(parse(parserOptions(format)));
  source.on('error', (err) => parser.destroy(err));
  let lastLine = 0;
  try {
    for await (const item of parser as AsyncIterable<{ record: string[]; info: { lines: number } }>) {
      lastLine = item.info.lines;
      yield { fields: item.record, line: lastLine };
    }
  } catch (error) {
    if ((error as { code?: string }).code?.startsWith('CSV_') === true) throw describeCsvError(error, displayName, lastLine);
    throw new InputError(`cannot read ${displayName}: ${(error as Error).message}`, { cause: error });
  } finally {
    source.destroy();
  }
}
