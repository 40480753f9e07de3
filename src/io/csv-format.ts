import { closeSync, openSync, readSync } from 'node:fs';
import { InputError } from '../errors.js';

/** What a CSV file's head says about reading it; apart from the parser, so a rerun served from a cached scan never loads csv-parse. */
export interface CsvFormat {
  delimiter: string;
  /** The file starts with a UTF-8 byte-order mark (spreadsheet exports do). */
  bom: boolean;
  /** How the first line ends (CRLF from Windows, CR from old Mac exports): output rows end the same way. */
  lineEnd: '\r\n' | '\n' | '\r';
  /** The start of the file is valid UTF-8 (else: most likely Latin-1 or Windows-1252). */
  utf8: boolean;
}

const DELIMITERS = [',', ';', '\t', '|'] as const;

/** The delimiter occurring most outside quotes in the header line (European spreadsheets export `;`); none of them: one column. */
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
  // Synchronous: one small read at start-up, with nothing to overlap it.
  const fd = openSync(path, 'r');
  try {
    const buf = Buffer.alloc(64 * 1024);
    const bytesRead = readSync(fd, buf, 0, buf.length, 0);
    const head = buf.subarray(0, bytesRead);
    if ((head[0] === 0xff && head[1] === 0xfe) || (head[0] === 0xfe && head[1] === 0xff)) {
      throw new InputError(`${displayName} is UTF-16 encoded; save it as UTF-8 CSV and run again`);
    }
    if (head.includes(0)) throw new InputError(`${displayName} is not a text file (it contains NUL bytes)`);
    let utf8 = true;
    try {
      // Streaming: a character cut at the end of the sample is not an error.
      new TextDecoder('utf-8', { fatal: true }).decode(head, { stream: true });
    } catch {
      utf8 = false;
    }
    let text = head.toString('utf8');
    const bom = text.charCodeAt(0) === 0xfeff;
    if (bom) text = text.slice(1);
    const end = text.search(/[\r\n]/);
    const lineEnd = end === -1 || text[end] === '\n' ? '\n' : text[end + 1] === '\n' ? '\r\n' : '\r';
    return { delimiter: sniffDelimiter(end === -1 ? text : text.slice(0, end)), bom, lineEnd, utf8 };
  } finally {
    closeSync(fd);
  }
}
