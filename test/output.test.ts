import { fstatSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROW_WINDOW } from '../src/io/output.js';
import { startSandbox, type Sandbox } from '../src/sandbox/index.js';
import { readCsvFile, runCli, tempDir } from './helpers/cli.js';
import { baseEnv } from './helpers/setup.js';
import { BIN, spawnCli } from './helpers/spawn.js';

const isOpen = (fd: number): boolean => {
  try {
    fstatSync(fd);
    return true;
  } catch {
    return false;
  }
};

const KEY = 'sk_test_output';
let sb: Sandbox;
let dir: ReturnType<typeof tempDir>;
let known: string;
let n = 0;

beforeAll(async () => {
  sb = await startSandbox({ keys: [{ key: KEY }] });
  dir = tempDir();
  known = [...sb.directory][0]?.domain as string;
});
afterAll(async () => {
  await sb.close();
  dir.cleanup();
});

/** Runs a batch over `input` and returns the output as text. */
async function enrich(input: string | Buffer, extra: string[] = []): Promise<string> {
  const i = n++;
  const path = dir.file(`in${i}.csv`);
  writeFileSync(path, input);
  const out = dir.file(`out${i}.csv`);
  const run = await runCli([path, '-o', out, ...extra], { env: { ENRICH_BASE_URL: sb.url, ENRICH_API_KEY: KEY } });
  expect(run.code, run.stderr).toBe(0);
  return readFileSync(out, 'utf8');
}

const RESULT_HEADER = 'enrich_status,enrich_error,enrich_source,enrich_bought_at,company_domain,company_name,company_website_url,company_description,company_industry,company_employee_count,company_revenue_range,company_ownership_type,company_year_founded,company_specialties,company_hq_country,company_hq_city,company_last_updated';
const miss = `no_match${','.repeat(16)}`;

describe('CSV results copy every row byte for byte', () => {
  it('keeps quoting, spacing and case exactly as they were, and the line breaks of the input', async () => {
    const text = await enrich(`Name , "Web"\r\n"Joe ""J"" Bloggs",  "nobody-here-1.com"  \r\n`);
    expect(text).toBe(`Name , "Web",${RESULT_HEADER}\r\n"Joe ""J"" Bloggs",  "nobody-here-1.com"  ,${miss}\r\n`);
  });

  it('drops blank lines and all-empty rows, keeps quoted line breaks, and ends the last row', async () => {
    const text = await enrich('domain,note\n\nnobody-a.com,"line one\nline two"\n,\n,,\n\nnobody-b.com,x');
    expect(text).toBe(`domain,note,${RESULT_HEADER}\nnobody-a.com,"line one\nline two",${miss}\nnobody-b.com,x,${miss}\n`);
  });

  it('answers in the input dialect: semicolons stay semicolons, a BOM stays', async () => {
    const text = await enrich(`\ufeffNaam;Website\r\nA;nobody-c.nl\r\n`);
    expect(text).toBe(`\ufeffNaam;Website;${RESULT_HEADER.replace(/,/g, ';')}\r\nA;nobody-c.nl;${miss.replace(/,/g, ';')}\r\n`);
  });

  it('strips a BOM only at the start of the file, never from a row that starts with U+FEFF', async () => {
    const text = await enrich(`\ufeffdomain,note\n\ufeffnobody-h.com,x\n`);
    expect(text).toBe(`\ufeffdomain,note,${RESULT_HEADER}\n\ufeffnobody-h.com,x,${miss}\n`);
  });

  it('gives a headerless list of domains a header', async () => {
    const text = await enrich(`nobody-d.com\nco.uk\n`);
    expect(text).toBe(`domain,${RESULT_HEADER}\nnobody-d.com,${miss}\nco.uk,invalid,public_suffix${','.repeat(15)}\n`);
  });

  it("writes a matched row's record in the columns, specialties joined by '; '", async () => {
    const c = [...sb.directory].find((x) => x.description?.includes(',') !== true && x.specialties.length > 1 && x.description !== null);
    if (c === undefined) throw new Error('fixture');
    const text = await enrich(`domain\n${c.domain}\n`);
    const row = text.split('\n')[1] as string;
    expect(row).toMatch(new RegExp(`^${c.domain.replace(/\./g, '\\.')},matched,,bought,\\d{4}-\\d\\d-\\d\\dT[^,]+Z,${c.domain.replace(/\./g, '\\.')},`));
    expect(row).toContain(c.specialties.join('; '));
  });
});

describe('results made a window of rows at a time', () => {
  // CSV and JSONL, bought and reused.
  it("gives every row its record, in order, however far apart a company's rows are", async () => {
    // More rows than three windows (io/output.ts ROW_WINDOW), and more companies than the records
    // held at once: a company's later rows come windows after its records were let go.
    const companies = [...sb.directory].slice(0, ROW_WINDOW + 400).map((c) => c.domain);
    const rows = Array.from({ length: 3 * ROW_WINDOW + 123 }, (_, i) => (i % 5 < 3 ? companies[(i * 7) % companies.length] : `nobody-w${i}.com`) as string);
    const path = dir.file('windows.csv', `id,domain\n${rows.map((d, i) => `${i},${d}`).join('\n')}\n`);
    const env = { ENRICH_BASE_URL: sb.url, ENRICH_API_KEY: KEY };
    const expected = (firstSource: string): string[][] => {
      const seen = new Set<string>();
      return rows.map((d, i) => {
        if (d.startsWith('nobody-')) return [String(i), d, 'no_match', '', '|'];
        const source = seen.has(d) ? 'repeat' : firstSource;
        seen.add(d);
        const c = sb.directory.lookup(d);
        return [String(i), d, 'matched', source, `${c?.name}|${c?.last_updated}`];
      });
    };
    for (const [format, source] of [['csv', 'bought'], ['jsonl', 'store'], ['csv', 'store']] as const) {
      const out = dir.file(`windows.out.${format}`);
      const run = await runCli([path, '-o', out], { env });
      expect(run.code, run.stderr).toBe(0);
      const got = format === 'csv' ? readCsvFile(out) : readFileSync(out, 'utf8').trim().split('\n').map((l) => JSON.parse(l) as Record<string, string>);
      // The name comes with the match; the last update only with the record.
      const cells = (r: Record<string, unknown>): string[] => [String(r['id']), String(r['domain']), String(r['enrich_status']), String(r['enrich_source'] ?? ''), `${r['company_name'] ?? ''}|${r['company_last_updated'] ?? ''}`];
      expect(got.map(cells)).toStrictEqual(expected(source));
    }
  });
});

describe('the scan cache', () => {
  it('is used on a resume, and ignored (then rebuilt) when damaged or for another --column', async () => {
    const path = dir.file('cache.csv');
    writeFileSync(path, `Website,Other\n${known},nobody-e.com\nhttps://www.${known}/x,nobody-f.com\n`);
    const env = { ENRICH_BASE_URL: sb.url, ENRICH_API_KEY: KEY };
    const run = (extra: string[] = []) => runCli([path, '-o', dir.file('cache.out.csv'), ...extra], { env });
    expect((await run()).code).toBe(0);
    // The second run reuses what the first bought: the same rows, now from the store.
    const expected = readFileSync(dir.file('cache.out.csv'), 'utf8').replaceAll(',matched,,bought,', ',matched,,store,');
    const scans = join(process.env['XDG_STATE_HOME'] as string, 'enrich', 'scans');
    const cache = join(scans, readdirSync(scans)[0] as string);
    expect(readFileSync(cache).length).toBeGreaterThan(0);
    expect((await run()).code).toBe(0);
    expect(readFileSync(dir.file('cache.out.csv'), 'utf8')).toBe(expected);
    // Damaged: ignored and rebuilt, same output.
    writeFileSync(cache, readFileSync(cache).subarray(0, 40));
    expect((await run()).code).toBe(0);
    expect(readFileSync(dir.file('cache.out.csv'), 'utf8')).toBe(expected);
    expect(readFileSync(cache).length).toBeGreaterThan(40);
    // Another column: the cache does not apply; the other column's domains are read.
    const other = await run(['--column', 'Other']);
    expect(other.code).toBe(0);
    expect(readCsvFile(dir.file('cache.out.csv')).map((r) => r['enrich_status'])).toStrictEqual(['no_match', 'no_match']);
  });
});

describe('line endings', () => {
  it('keeps rows that end otherwise than the header apart, each ending like the header', async () => {
    // A line appended to a CRLF export with `echo`, and one ending in a lone CR.
    const text = await enrich('domain\r\nnobody-m1.com\nnobody-m2.com\r\nnobody-m3.com\rnobody-m4.com\r\n');
    expect(text).toBe(`domain,${RESULT_HEADER}\r\n${['m1', 'm2', 'm3', 'm4'].map((m) => `nobody-${m}.com,${miss}\r\n`).join('')}`);
  });

  it('ends rows with a lone CR when the header line does (old Mac exports)', async () => {
    expect(await enrich('domain\rnobody-c1.com\rnobody-c2.com\r')).toBe(`domain,${RESULT_HEADER}\rnobody-c1.com,${miss}\rnobody-c2.com,${miss}\r`);
  });
});

describe('output destinations', () => {
  it('writes into a pipe or device in place, follows a symlink, and refuses a directory', async () => {
    const { execFileSync } = await import('node:child_process');
    const { lstatSync, mkdirSync, readlinkSync, symlinkSync, statSync } = await import('node:fs');
    const env = { ENRICH_BASE_URL: sb.url, ENRICH_API_KEY: KEY };
    const input = dir.file('dest.csv', 'domain\nnobody-g.com\n');

    // A FIFO stands in for /dev/null or >(gzip): renaming over it would replace it with a file.
    const fifo = dir.file('out.fifo');
    execFileSync('mkfifo', [fifo]);
    const reader = import('node:fs/promises').then((fs) => fs.readFile(fifo, 'utf8'));
    const toFifo = await runCli([input, '-o', fifo], { env });
    expect(toFifo.code).toBe(0);
    expect(await reader).toContain('nobody-g.com,no_match');
    expect(statSync(fifo).isFIFO()).toBe(true);

    // A link to a pipe whose target names no file: /dev/stdout into a pipeline, as bash's >(gzip).
    const piped = dir.file('piped.csv');
    const rc = dir.file('piped.rc');
    const script = `{ "$NODE" "$BIN" "$IN" -o /dev/stdout; echo $? > "$RC"; } | cat > "$OUT"`;
    execFileSync('sh', ['-c', script], { env: { ...baseEnv(), ...env, NODE: process.execPath, BIN, IN: input, RC: rc, OUT: piped } });
    expect(readFileSync(rc, 'utf8').trim()).toBe('0');
    expect(readFileSync(piped, 'utf8')).toContain('nobody-g.com,no_match');

    // /dev/stdout appended to a log: written through the descriptor, so the log keeps what it had.
    const log = dir.file('app.log', 'old line\n');
    execFileSync('sh', ['-c', '"$NODE" "$BIN" "$IN" -o /dev/stdout --quiet >> "$LOG"'], { env: { ...baseEnv(), ...env, NODE: process.execPath, BIN, IN: input, LOG: log } });
    expect(readFileSync(log, 'utf8')).toMatch(/^old line\ndomain,enrich_status,.*\nnobody-g\.com,no_match,/s);
    expect(statSync(log).mode & 0o777).not.toBe(0o600);

    // /dev/stdout when stdout is a socket (a parent's stdio, systemd's journal): no open by path.
    const socketed = spawnCli([input, '-o', '/dev/stdout', '--quiet'], { env });
    expect(await socketed.exited, socketed.stderr()).toBe(0);
    expect(socketed.stdout()).toContain('nobody-g.com,no_match');

    // A descriptor nobody opened for it is refused before anything is done (one this process
    // has not open: an earlier test's store may hold a low one until collected).
    let fd = 97;
    while (isOpen(fd)) fd++;
    const unopened = await runCli([input, '-o', `/dev/fd/${fd}`], { env });
    expect(unopened).toMatchObject({ code: 2, stderr: `enrich: -o /dev/fd/${fd}: no descriptor ${fd} is open for enrich (as with \`${fd}> file\`)\n` });

    const real = dir.file('real.csv');
    const link = dir.file('link.csv');
    symlinkSync(real, link);
    expect((await runCli([input, '-o', link], { env })).code).toBe(0);
    expect(lstatSync(link).isSymbolicLink()).toBe(true);
    expect(readlinkSync(link)).toBe(real);
    expect(readFileSync(real, 'utf8')).toContain('nobody-g.com,no_match');

    const folder = dir.file('folder');
    mkdirSync(folder);
    const refused = await runCli([input, '-o', folder], { env });
    expect(refused).toMatchObject({ code: 2, stderr: `enrich: -o ${folder} is a directory; give a file path, or - for stdout\n` });
  });
});
