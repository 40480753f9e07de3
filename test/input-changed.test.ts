import { existsSync, renameSync, writeFileSync } from 'node:fs';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../src/sandbox/index.js';
import { csvText, readCsvFile, tempDir } from './helpers/cli.js';
import { startGate, type Gate } from './helpers/gate.js';
import { spawnCli } from './helpers/spawn.js';

/**
 * Issue 19, item 15: the batch reads its input twice (scan, then results by the byte ranges the
 * scan found). A file rewritten between the two had its new rows paired with the old rows'
 * companies, extra rows dropped, exit 0. The rewrite here happens while the run's requests are
 * held at a gate: after the scan, before the results, whatever the machine's speed.
 */
const KEY = 'sk_test_input_changed';
let sb: Sandbox;
let domains: string[];
let dir: ReturnType<typeof tempDir>;
let gate: Gate;

// A sandbox per test: each test's store is its own, and so must be the account it counts charges in.
beforeEach(async () => {
  sb = await startSandbox({ keys: [{ key: KEY }] });
  domains = [...sb.directory].slice(0, 12).map((c) => c.domain);
  dir = tempDir();
});
afterEach(async () => {
  await gate.close();
  await sb.close();
  dir.cleanup();
});

async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setTimeout(resolve, 5));
}

const rows = (names: readonly string[]): string => csvText([['domain', 'row'], ...names.map((d, i) => [d, `r${i}`])]);

describe.each([
  ['rewritten in place, with more rows', (path: string, first: string[]) => writeFileSync(path, rows([...first.slice(3), ...domains.slice(6)]))],
  [
    'replaced by a file of the same size and row count (rows reversed)',
    (path: string, first: string[]) => {
      writeFileSync(`${path}.new`, rows([...first].reverse()));
      renameSync(`${path}.new`, path);
    },
  ],
])('an input %s while the run buys', (_name, rewrite) => {
  it('is refused in one line with exit 2, writes no results, and the rerun buys nothing twice', async () => {
    const first = domains.slice(0, 6);
    const input = dir.file('in.csv', rows(first));
    const out = dir.file('out.csv');
    gate = await startGate(sb.url, 3);
    const run = spawnCli([input, '-o', out, '--quiet', '--concurrency', '1'], { env: { ENRICH_BASE_URL: gate.url, ENRICH_API_KEY: KEY } });
    await until(() => gate.passed >= 3);
    rewrite(input, first);
    gate.open();
    expect(await run.exited, run.stderr()).toBe(2);
    expect(run.stderr()).toBe(
      `enrich: ${input} changed during the run (rewritten or replaced); its results were stopped, as they would pair rows with the wrong companies. Everything bought is kept in the store: run the same command again, and nothing is bought twice\n`,
    );
    expect(existsSync(out)).toBe(false);

    const rerun = spawnCli([input, '-o', out, '--quiet'], { env: { ENRICH_BASE_URL: sb.url, ENRICH_API_KEY: KEY } });
    expect(await rerun.exited, rerun.stderr()).toBe(0);
    // Each row now carries its own company.
    for (const row of readCsvFile(out)) expect(row).toMatchObject({ enrich_status: 'matched', company_domain: row['domain'] });
    expect([...sb.chargesByDomain(KEY).values()].filter((n) => n > 1)).toStrictEqual([]);
  });
});
