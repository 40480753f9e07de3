import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { resolveRunOptions } from '../../src/cli/options.js';
import { parseCommandLine, type ParsedCommand } from '../../src/cli/program.js';
import type { RunOptions } from '../../src/commands/run.js';

const DAY = 86_400_000;
const ENV = { ENRICH_BASE_URL: 'https://data.example.com', ENRICH_API_KEY: 'sk_table', XDG_STATE_HOME: '/state' };

function parse(argv: string[]): { parsed: ParsedCommand; errors: string } {
  let errors = '';
  const parsed = parseCommandLine(argv, { writeOut: () => {}, writeErr: (s) => (errors += s) }, ENV);
  return { parsed, errors };
}

async function options(argv: string[], env: Record<string, string> = ENV): Promise<RunOptions> {
  const { parsed } = parse(argv);
  if (parsed.kind !== 'run') throw new Error(`not a run: ${JSON.stringify(parsed)}`);
  return resolveRunOptions(parsed.flags, env);
}

describe('argv -> options', () => {
  it.each<[string, string[], Partial<RunOptions>]>([
    ['defaults', ['in.csv'], { input: 'in.csv', output: '-', format: 'csv', dryRun: false, maxCredits: null, maxAgeMs: null, missMaxAgeMs: 30 * DAY, store: join('/state', 'enrich', 'store.db'), concurrency: 128 }],
    ['stdin to a JSONL file', ['-', '-o', 'out.jsonl'], { input: '-', output: 'out.jsonl', format: 'jsonl', writesOutput: true }],
    ['an explicit format wins over the extension', ['in.csv', '-o', 'out.jsonl', '--format', 'csv'], { format: 'csv' }],
    ['a dry run writes results only when asked', ['in.csv', '--dry-run'], { dryRun: true, writesOutput: false }],
    ['a cap, an age, a miss age', ['in.csv', '--max-credits', '50', '--max-age', '30d', '--miss-max-age', '12h'], { maxCredits: 50, maxAgeMs: 30 * DAY, missMaxAgeMs: 12 * 3_600_000 }],
    ['--fresh is --max-age 0', ['in.csv', '--fresh'], { maxAgeMs: 0 }],
    ['--store names the store', ['in.csv', '--store', '/tmp/enrich.db'], { store: '/tmp/enrich.db' }],
    ['the embedded sandbox', ['in.csv', '--sandbox'], { service: { kind: 'sandbox', options: expect.anything() as never } }],
    ['the service from the environment', ['in.csv'], { service: { kind: 'remote', baseUrl: 'https://data.example.com/', apiKey: 'sk_table' } }],
  ])('%s', async (_, argv, expected) => {
    expect(await options(argv)).toMatchObject(expected);
  });

  it('takes the store from ENRICH_STORE, and --store over it', async () => {
    expect((await options(['in.csv'], { ...ENV, ENRICH_STORE: '/env.db' })).store).toBe('/env.db');
    expect((await options(['in.csv', '--store', '/flag.db'], { ...ENV, ENRICH_STORE: '/env.db' })).store).toBe('/flag.db');
  });

  // A typo in the name would otherwise start an empty store.
  it("refuses a named store in a missing folder, but makes the default one's folder", async () => {
    const refusal = 'the store /no-such-folder/enrich.db: the folder /no-such-folder does not exist; create it, or fix --store (or ENRICH_STORE)';
    await expect(options(['in.csv', '--store', '/no-such-folder/enrich.db'])).rejects.toThrow(refusal);
    await expect(options(['in.csv'], { ...ENV, ENRICH_STORE: '/no-such-folder/enrich.db' })).rejects.toThrow(refusal);
    expect((await options(['in.csv'], { ...ENV, XDG_STATE_HOME: '/no-such-folder' })).store).toBe('/no-such-folder/enrich/store.db');
    // A file where the folder should be is named as such.
    const file = `${process.cwd()}/package.json`;
    await expect(options(['in.csv', '--store', `${file}/enrich.db`])).rejects.toThrow(`the store ${file}/enrich.db: ${file} is not a folder; create it, or fix --store (or ENRICH_STORE)`);
  });

  it.each([
    [['in.csv', '--max-age', '30'], '--max-age takes a duration such as 30d'],
    [['in.csv', '--max-age', 'soon'], '--max-age takes a duration such as 30d'],
    [['in.csv', '--concurrency', '0'], '--concurrency must be a whole number from 1 to 256'],
    [['in.csv', '--format', 'xml'], "Allowed choices are csv, jsonl"],
  ])('refuses %j with one line', (argv, message) => {
    const { parsed, errors } = parse(argv);
    expect(parsed).toStrictEqual({ kind: 'exit', exitCode: 2 });
    expect(errors).toContain(message);
  });

  it('refuses flags that exclude each other', async () => {
    await expect(options(['in.csv', '--fresh', '--max-age', '3d'])).rejects.toThrow('--fresh and --max-age exclude each other');
    await expect(options(['in.csv', '--sandbox', '--base-url', 'https://x.example'])).rejects.toThrow('--sandbox and --base-url exclude each other');
  });

  // A call still running would have its key retired and be paid twice.
  it('refuses a --settle shorter than a request may take', async () => {
    await expect(options(['in.csv', '--settle', '0s'])).rejects.toThrow(
      '--settle 0s is shorter than a request may take (--timeout 60s): a paid call whose answer was lost may still be running, and retiring its key then can pay twice; give --settle 60s or more (or a shorter --timeout)',
    );
    await expect(options(['in.csv', '--settle', '5s', '--timeout', '10s'])).rejects.toThrow('--settle 5s is shorter than a request may take (--timeout 10s)');
    await expect(options(['in.csv', '--timeout', '0s'])).rejects.toThrow('--timeout: give from 1s to 1h');
    await expect(options(['in.csv', '--timeout', '30d'])).rejects.toThrow('--timeout: give from 1s to 1h');
    // A deadline past the default minute, the settle unsaid: the settle is the deadline, never shorter.
    expect(await options(['in.csv', '--timeout', '5m'])).toMatchObject({ settleMs: 300_000, requestDeadlineMs: 300_000 });
    expect(await options(['in.csv', '--timeout', '10s'])).toMatchObject({ settleMs: null, requestDeadlineMs: 10_000 });
    expect(await options(['in.csv', '--settle', '5s', '--timeout', '5s'])).toMatchObject({ settleMs: 5_000, requestDeadlineMs: 5_000 });
    expect(await options(['in.csv', '--settle', '2m'])).toMatchObject({ settleMs: 120_000, requestDeadlineMs: null });
  });

  it("keeps the embedded sandbox's play credits in a store of its own, unless --store names one", async () => {
    expect((await options(['in.csv', '--sandbox'], { ...ENV, ENRICH_STORE: '/team.db' })).store).toBe(join('/state', 'enrich', 'sandbox.db'));
    expect((await options(['in.csv', '--sandbox', '--store', '/tmp/play.db'])).store).toBe('/tmp/play.db');
  });

  it('parses the ledger commands', () => {
    expect(parse(['ledger']).parsed).toStrictEqual({ kind: 'ledger', options: { store: undefined, json: false, action: { kind: 'show' } } });
    expect(parse(['ledger', 'runs', '--limit', '5', '--json']).parsed).toMatchObject({ kind: 'ledger', options: { json: true, action: { kind: 'runs', limit: 5 } } });
    expect(parse(['ledger', 'export', '-o', 'all.jsonl']).parsed).toMatchObject({ options: { action: { kind: 'export', format: 'jsonl', output: 'all.jsonl' } } });
    expect(parse(['ledger', 'prune', '--older-than', '2w', '--store', '/s.db']).parsed).toMatchObject({ options: { store: '/s.db', action: { kind: 'prune', olderThanMs: 14 * DAY, dryRun: false } } });
    expect(parse(['ledger', 'spend']).parsed).toMatchObject({ options: { action: { kind: 'spend', by: 'month' } } });
    expect(parse(['ledger', 'spend', '--by', 'person', '--json']).parsed).toMatchObject({ options: { json: true, action: { kind: 'spend', by: 'person' } } });
    expect(parse(['ledger', 'spend', '--by', 'week']).parsed).toStrictEqual({ kind: 'exit', exitCode: 2 });
    expect(parse(['ledger', 'copy', 'a.db', 'postgres://db/enrich', '--dry-run']).parsed).toStrictEqual({
      kind: 'ledger',
      options: { store: undefined, json: false, action: { kind: 'copy', from: 'a.db', to: 'postgres://db/enrich', dryRun: true } },
    });
  });
});
