import { describe, expect, it } from 'vitest';
import { csvText, runCli } from './helpers/cli.js';
import { sandboxSuite } from './helpers/sandbox-suite.js';

/**
 * One JSON style everywhere (issue 22): snake_case keys, times as ISO 8601 UTC strings, and an
 * export's JSONL as flat as a run's. Every key of every JSON the CLI writes is checked.
 */
const KEY = 'sk_test_json_style_0123';
const t = sandboxSuite(KEY);
const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

/** Every key, at any depth, is snake_case; every value under a key ending in _at or named since is an ISO time or null. */
function expectStyle(value: unknown, path = '$'): void {
  if (Array.isArray(value)) return value.forEach((v, i) => expectStyle(v, `${path}[${i}]`));
  if (value === null || typeof value !== 'object') return;
  for (const [key, v] of Object.entries(value)) {
    expect(key, `${path}.${key}`).toMatch(/^[a-z][a-z0-9_]*$/);
    if (/_at$|^since$/.test(key) && v !== null && typeof v !== 'object') expect(v, `${path}.${key}`).toMatch(ISO);
    if (typeof v === 'object') expectStyle(v, `${path}.${key}`);
  }
}

describe('every JSON the CLI writes', () => {
  // --summary-json, ledger, ledger runs, release, export and doctor.
  it('is snake_case with ISO 8601 UTC times, in every command that writes JSON', async () => {
    await t.sandbox();
    const domains = [...t.sb.directory].slice(0, 4).map((c) => c.domain);
    const input = t.dir.file('in.csv', csvText([['domain'], ...domains.map((d) => [d]), [domains[0] as string]]));
    const run = await runCli([input, '-o', t.dir.file('out.jsonl'), '--summary-json', '-'], { env: t.env() });
    expect(run.code, run.stderr).toBe(0);
    expectStyle(JSON.parse(run.stdout));

    const show = JSON.parse((await runCli(['ledger', '--json'])).stdout) as { services: Record<string, unknown>[] };
    expectStyle(show);
    expect(show.services[0]).toMatchObject({ companies: 4, at_risk: 0 });
    expect(show.services[0]?.['oldest_bought_at']).toMatch(ISO);

    const runsJson = JSON.parse((await runCli(['ledger', 'runs', '--json'])).stdout) as { store: string; runs: Record<string, unknown>[] };
    expectStyle(runsJson);
    expect(typeof runsJson.store).toBe('string');
    const runs = runsJson.runs;
    expect(runs[0]).toMatchObject({ service: `${t.sb.url}/api/v1/public`, dry_run: false, status: 'done', credits: 4 });
    expect(runs[0]?.['started_at']).toMatch(ISO);
    const release = JSON.parse((await runCli(['ledger', 'release', '--json'])).stdout) as { store: string; at_risk: unknown[] };
    expectStyle(release);
    expect(release).toMatchObject({ store: expect.any(String), at_risk: expect.any(Array) });

    // The export's JSONL: one flat object a record, under the names a run's JSONL uses.
    const exported = (await runCli(['ledger', 'export', '--format', 'jsonl'])).stdout.trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
    const fromRun = JSON.parse((await runCli(['ledger', 'export', '--json'])).stdout.split('\n')[0] as string) as Record<string, unknown>;
    expect(exported).toHaveLength(4);
    for (const line of exported) {
      expectStyle(line);
      expect(Object.values(line).some((v) => v !== null && typeof v === 'object' && !Array.isArray(v))).toBe(false);
      expect(Array.isArray(line['company_specialties'])).toBe(true);
    }
    expect(Object.keys(fromRun)).toEqual(Object.keys(exported[0] as object));
    const runLine = JSON.parse((await import('node:fs')).readFileSync(t.dir.file('out.jsonl'), 'utf8').split('\n')[0] as string) as Record<string, unknown>;
    for (const key of Object.keys(runLine).filter((k) => k.startsWith('company_'))) expect(exported[0]).toHaveProperty(key);
  });

  it('`ledger export --json` exports JSONL; beside --format csv it is refused in one line', async () => {
    await t.sandbox();
    const input = t.dir.file('in2.csv', csvText([['domain'], [[...t.sb.directory][0]?.domain as string]]));
    expect((await runCli([input, '-o', t.dir.file('o2.csv')], { env: t.env() })).code).toBe(0);
    const refused = await runCli(['ledger', 'export', '--json', '--format', 'csv']);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toBe('enrich: --json and --format csv exclude each other: --json exports JSONL (see enrich ledger export --help)\n');
  });

  it('`doctor --json` is one object: ok, to_fix, and each check', async () => {
    const r = await runCli(['doctor', '--sandbox', '--json', '--store', t.dir.file('none.db')]);
    expect(r.code, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout) as { ok: boolean; to_fix: number; checks: { check: string; status: string; text: string }[] };
    expectStyle(report);
    expect(report).toMatchObject({ ok: true, to_fix: 0 });
    expect(report.checks.map((c) => c.check)).toEqual(expect.arrayContaining(['address', 'reachable', 'key', 'endpoints', 'latency', 'store']));
    const bad = await runCli(['doctor', '--json', '--base-url', 'http://example.com'], { env: { ENRICH_API_KEY: 'sk_x_123456' } });
    expect(bad.code).toBe(2);
    const badReport = JSON.parse(bad.stdout) as { ok: boolean; checks: { check: string; status: string }[] };
    expect(badReport.ok).toBe(false);
    expect(badReport.checks[0]).toMatchObject({ check: 'address', status: 'fix' });
  });
});
