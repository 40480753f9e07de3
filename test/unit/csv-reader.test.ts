import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { detectFormat, readCsv, sniffDelimiter } from '../../src/io/csv-reader.js';

const dir = mkdtempSync(join(tmpdir(), 'enrich-csv-'));
let n = 0;
function file(content: string | Buffer): string {
  const path = join(dir, `f${n++}.csv`);
  writeFileSync(path, content);
  return path;
}

async function records(content: string | Buffer): Promise<string[][]> {
  const path = file(content);
  const out = [];
  for await (const batch of readCsv(path, 'in.csv', await detectFormat(path, 'in.csv'))) out.push(...batch.records);
  return out;
}

describe('readCsv', () => {
  it('reads BOM, CRLF, quoted commas, quotes and newlines, and skips blank lines', async () => {
    const rows = await records('\ufeffName,Domain,Notes\r\n"Acme, Inc.",acme.com,"said ""hi""\r\nthen left"\r\n\r\n,,\r\nBeta,beta.io,\r\n');
    expect(rows).toStrictEqual([
      ['Name', 'Domain', 'Notes'],
      ['Acme, Inc.', 'acme.com', 'said "hi"\r\nthen left'],
      ['Beta', 'beta.io', ''],
    ]);
  });

  it('ends a row at CRLF, LF or CR, mixed in one file; quoted line breaks stay in their field', async () => {
    const rows = await records('id,domain\r\n1,a.com\n2,b.com\r\n3,"c\nd.com"\r4,e.com\r\n');
    expect(rows).toStrictEqual([['id', 'domain'], ['1', 'a.com'], ['2', 'b.com'], ['3', 'c\nd.com'], ['4', 'e.com']]);
    expect(await records('domain\rA.com\rb.com\r')).toStrictEqual([['domain'], ['A.com'], ['b.com']]);
  });

  it('keeps stray quotes inside unquoted fields', async () => {
    const rows = await records('name,domain\nJoe\'s "Bar",joes.com\n');
    expect(rows[1]).toStrictEqual(['Joe\'s "Bar"', 'joes.com']);
  });

  it('reads semicolon and tab separated files', async () => {
    expect((await records('Name;Website\nA;a.com\n'))[1]).toStrictEqual(['A', 'a.com']);
    expect((await records('Name\tWebsite\nA\ta.com\n'))[1]).toStrictEqual(['A', 'a.com']);
  });

  it('names the line of a ragged row', async () => {
    await expect(records('a,b\n1,2\n3\n4,5\n')).rejects.toThrow('in.csv:3: malformed CSV: the row has 1 fields where the header has 2');
  });

  it('names the line of a ragged row after quoted CRLF line breaks and skipped blank rows', async () => {
    await expect(records('a,b\r\n"x\r\ny\r\nz",1\r\n\r\n,\r\n3\r\n')).rejects.toThrow('in.csv:7: malformed CSV: the row has 1 fields where the header has 2');
    await expect(records('a,b\n1,2\n3')).rejects.toThrow('in.csv:3:');
  });

  it('names the line where the row with an unterminated quote starts', async () => {
    await expect(records('a,b\n1,2\n3,"four\n5,6\n7,8\n')).rejects.toThrow('in.csv:3: malformed CSV: a quoted field in the row starting here is never closed');
    await expect(records('a,b\r\n"1\r\n1",2\r\n\r\n"3,4\r\n')).rejects.toThrow('in.csv:5: malformed CSV');
    // Lines end as rows may: a lone CR (old Mac exports) and mixed endings count too.
    await expect(records('a,b\r1,2\r3\r4,5\r')).rejects.toThrow('in.csv:3: malformed CSV: the row has 1 fields where the header has 2');
    await expect(records('a,b\r\n1,2\n3,4\r5\r\n')).rejects.toThrow('in.csv:4: malformed CSV: the row has 1 fields where the header has 2');
    await expect(records('a,b\r1,2\r3,"four\r5,6\r')).rejects.toThrow('in.csv:3: malformed CSV: a quoted field in the row starting here is never closed');
  });

  it('refuses UTF-16 and binary files with a clear message', async () => {
    await expect(detectFormat(file(Buffer.from([0xff, 0xfe, 0x61, 0x00])), 'x.csv')).rejects.toThrow('x.csv is UTF-16 encoded; save it as UTF-8 CSV and run again');
    await expect(detectFormat(file(Buffer.from([0x50, 0x4b, 0x03, 0x04, 0x00])), 'x.xlsx')).rejects.toThrow(/not a text file/);
  });
});

describe('sniffDelimiter', () => {
  it.each([
    ['a,b,c', ','],
    ['a;b;c', ';'],
    ['a\tb', '\t'],
    ['"x;y",b,c', ','],
    ['domain', ','],
  ])('%j -> %j', (line, d) => expect(sniffDelimiter(line)).toBe(d));
});
