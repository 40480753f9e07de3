import { stringify } from 'csv-stringify/sync';
import { describe, expect, it } from 'vitest';
import type { CsvFormat } from '../../src/io/csv-format.js';
import { csvSuffix } from '../../src/io/output.js';

/** A small seeded generator (mulberry32): the same strings on every machine. */
function seeded(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// Every character that can change how a field is written, and some that must not.
const ALPHABET = [',', ';', '\t', '|', '"', "'", '\r', '\n', ' ', 'a', 'Z', '0', 'é', '\u2028', '=', '-', '\\'];

describe('csvSuffix', () => {
  // The result columns are written by hand (io/output.ts): csv-stringify is the oracle, told to
  // quote any line break (its default quotes only the file's own line end: see below).
  it('writes every field as csv-stringify does, in each dialect', () => {
    const random = seeded(23);
    for (const delimiter of [',', ';', '\t', '|']) {
      for (const lineEnd of ['\n', '\r\n', '\r'] as const) {
        const format: CsvFormat = { delimiter, lineEnd, bom: false, utf8: true };
        for (let n = 0; n < 300; n++) {
          const values = Array.from({ length: 1 + Math.floor(random() * 5) }, () =>
            Array.from({ length: Math.floor(random() * 6) }, () => ALPHABET[Math.floor(random() * ALPHABET.length)]).join(''),
          );
          expect(csvSuffix(values, format)).toBe(stringify([['', ...values]], { delimiter, record_delimiter: lineEnd, quote_record_delimiter: true }));
        }
      }
    }
  });

  it('quotes a field with the delimiter, a quote or a line break, and only those', () => {
    const format: CsvFormat = { delimiter: ';', lineEnd: '\r\n', bom: false, utf8: true };
    expect(csvSuffix(['a,b', 'c;d', 'say "hi"', 'two\nlines', '', 'plain'], format)).toBe(';a,b;"c;d";"say ""hi""";"two\nlines";;plain\r\n');
  });

  // Most readers would then split the row.
  it('quotes a lone LF in a CRLF file, which csv-stringify leaves bare by default', () => {
    const format: CsvFormat = { delimiter: ',', lineEnd: '\r\n', bom: false, utf8: true };
    expect(stringify([['', 'two\nlines']], { delimiter: ',', record_delimiter: '\r\n' })).toBe(',two\nlines\r\n');
    expect(csvSuffix(['two\nlines'], format)).toBe(',"two\nlines"\r\n');
  });
});
