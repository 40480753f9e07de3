import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hostileServer, json, type Hostile } from './helpers/hostile.js';
import { readCsvFile, runCli, tempDir } from './helpers/cli.js';

/** A record whose description spans two lines, as a service's free text may. */
const RECORD = {
  domain: 'acme.com',
  name: 'Acme',
  website_url: 'https://acme.com',
  description: 'Makes widgets.\nShips worldwide.',
  industry: 'Manufacturing',
  employee_count: 5,
  revenue_range: null,
  ownership_type: 'private',
  year_founded: 1999,
  specialties: ['widgets'],
  hq_country: 'FR',
  hq_city: 'Paris',
  last_updated: '2026-01-01T00:00:00Z',
};

let server: Hostile;
let dir: ReturnType<typeof tempDir>;

beforeAll(async () => {
  server = await hostileServer((req, res) =>
    req.method === 'GET'
      ? json(res, 200, { matched: true, credits_charged: 0, company: { domain: RECORD.domain, name: RECORD.name } })
      : json(res, 200, { matched: true, credits_charged: 1, credits_remaining: 10, company: RECORD }),
  );
  dir = tempDir();
});
afterAll(async () => {
  await server.close();
  dir.cleanup();
});

describe('a line break inside a cell', () => {
  it('is quoted in a CRLF file, so the row stays one row for any reader', async () => {
    const input = dir.file('in.csv', 'domain,note\r\nacme.com,first\r\n');
    const run = await runCli([input, '-o', dir.file('out.csv'), '--quiet'], { env: { ENRICH_BASE_URL: server.url, ENRICH_API_KEY: 'sk_test_linebreak' } });
    expect(run.code, run.stderr).toBe(0);
    const text = readFileSync(dir.file('out.csv'), 'utf8');
    // csv-stringify's default quoted only the file's own line end: the LF went out bare, and a
    // reader that splits on LF (most spreadsheets, pandas) saw the row end mid-description.
    expect(text).toContain('"Makes widgets.\nShips worldwide."');
    expect(text.split('\r\n').filter(Boolean)).toHaveLength(2);
    const [row] = readCsvFile(dir.file('out.csv'));
    expect(row).toMatchObject({ note: 'first', company_description: 'Makes widgets.\nShips worldwide.' });
  });
});
