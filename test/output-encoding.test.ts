import { readFileSync, writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeWindows1252 } from '../src/io/windows-1252.js';
import { startSandbox, type Sandbox } from '../src/sandbox/index.js';
import { runCli, tempDir } from './helpers/cli.js';

const KEY = 'sk_test_output_types';
let sb: Sandbox;
let dir: ReturnType<typeof tempDir>;

beforeAll(async () => {
  sb = await startSandbox({ keys: [{ key: KEY }] });
  dir = tempDir();
});
afterAll(async () => {
  await sb.close();
  dir.cleanup();
});

async function enrichFile(name: string, content: string | Buffer, extra: string[] = []): Promise<Buffer> {
  const input = dir.file(name, undefined);
  writeFileSync(input, content);
  const out = dir.file(`${name}.out${extra.includes('jsonl') ? '.jsonl' : '.csv'}`);
  const run = await runCli([input, '-o', out, ...extra], { env: { ENRICH_BASE_URL: sb.url, ENRICH_API_KEY: KEY } });
  expect(run.code, run.stderr).toBe(0);
  return readFileSync(out);
}

describe('JSONL keeps one type per key', () => {
  it('gives unmatched and invalid rows an empty specialties array, as matched rows have one', async () => {
    const company = [...sb.directory].find((c) => c.specialties.length > 0);
    if (company === undefined) throw new Error('fixture');
    const text = (await enrichFile('types.csv', `domain\n${company.domain}\nnobody-types.com\nnot a domain\n`, ['--format', 'jsonl'])).toString('utf8');
    const rows = text.trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(rows.map((r) => r['enrich_status'])).toEqual(['matched', 'no_match', 'invalid']);
    expect(rows[0]?.['company_specialties']).toEqual(company.specialties);
    for (const r of rows.slice(1)) {
      expect(r['company_specialties']).toEqual([]);
      expect(r['company_name']).toBeNull();
    }
  });
});

describe('a CSV result has one encoding', () => {
  it('writes the appended columns in Windows-1252 when the input is Latin-1', async () => {
    const company = [...sb.directory].find((c) => c.name === 'Müller Labs GmbH');
    if (company === undefined) throw new Error('fixture');
    const input = Buffer.from(`Firma,domain\nMüller,${company.domain}\n`, 'latin1');
    const out = await enrichFile('latin1.csv', input);
    // No UTF-8 multi-byte sequence anywhere: 0xC3 0xBC would be a UTF-8 ü.
    expect(out.includes(Buffer.from('ü', 'utf8'))).toBe(false);
    const text = out.toString('latin1');
    expect(text.split('\n')[1]).toMatch(/^Müller,xn--mllerlabs-q9a\.de,matched,,bought,[^,]+Z,xn--mllerlabs-q9a\.de,Müller Labs GmbH,/);
  });

  it('keeps UTF-8 for a UTF-8 input', async () => {
    const company = [...sb.directory].find((c) => c.name === 'Müller Labs GmbH');
    const out = await enrichFile('utf8.csv', `Firma,domain\nMüller,${company?.domain ?? ''}\n`);
    expect(out.toString('utf8').split('\n')[1]).toMatch(/^Müller,xn--mllerlabs-q9a\.de,matched,,bought,[^,]+Z,xn--mllerlabs-q9a\.de,Müller Labs GmbH,/);
  });

  it('maps the Windows-1252 extras and replaces what it cannot hold', () => {
    expect([...encodeWindows1252('a€é—"東')]).toEqual([0x61, 0x80, 0xe9, 0x97, 0x22, 0x3f]);
    expect([...encodeWindows1252('“x”')]).toEqual([0x93, 0x78, 0x94]);
  });
});
