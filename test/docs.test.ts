import { copyFileSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { startSandbox, type Sandbox } from '../src/sandbox/index.js';
import { tempDir } from './helpers/cli.js';
import { sql } from './helpers/postgres.js';
import { ROOT, sh, workspace } from './helpers/shell.js';

/**
 * Every `sh` block in docs/ is run here as written (issue 36), each doc's blocks in order in one
 * shell with `set -e`, as a reader would type them: the example service and key swapped for a
 * sandbox's, the example team store for a database of the suite's PostgreSQL, the sandbox's
 * example port for a free one. The `$` lines in docs/doctor.md are sample transcripts; their
 * cases are run by doctor.test.ts and doctor-team.test.ts, whose checks read those outputs.
 */
const DOCS = join(ROOT, 'docs');
const KEY = 'sk_test_docs_0123456789';
const TEAM_STORE_IN_DOCS = 'postgres://analyst@db.example.com/enrich_team';

const shBlocks = (doc: string): string[] =>
  [...readFileSync(join(DOCS, doc), 'utf8').matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => (m[1] as string).replace(/\s+#[^\n'"]*$/gm, '').trim());

let sb: Sandbox;
let dir: ReturnType<typeof tempDir>;
beforeAll(async () => {
  sb = await startSandbox({ keys: [{ key: KEY }] });
  dir = tempDir('enrich-docs-');
});
afterAll(async () => {
  await sb.close();
  dir.cleanup();
});

describe("the docs' commands", () => {
  // Issue 36: 112 KB of dense text was too much to read; what a reader needs fits in about 72.
  it('are at most about 75 KB in all', () => {
    const bytes = readdirSync(DOCS).reduce((n, f) => n + Buffer.byteLength(readFileSync(join(DOCS, f))), 0);
    expect(bytes).toBeLessThanOrEqual(75 * 1024);
  });

  it('every sh block in docs/ has its doc here, so none goes unrun', () => {
    const withBlocks = readdirSync(DOCS).filter((f) => shBlocks(f).length > 0).sort();
    expect(withBlocks).toStrictEqual(['budgets.md', 'input-and-display.md', 'sandbox.md', 'store-and-resume.md', 'team.md']);
  });

  it('run as written, doc by doc: a piped run, the ledger, budgets, the team store, the sandbox', async () => {
    const server = new URL(inject('postgresUrl'));
    const team = `enrich_docs_${process.pid}_${Date.now()}`;
    const teamUrl = new URL(server);
    teamUrl.pathname = `/${team}`;
    teamUrl.password = '';
    const pgEnv = { PGHOST: server.hostname, PGPORT: server.port, PGUSER: decodeURIComponent(server.username), PGPASSWORD: decodeURIComponent(server.password) };
    const { work, home, path } = workspace(dir.path);
    // What the blocks read: a CRM export whose third column is the website, a journal of enrich 0.1.
    copyFileSync(join(ROOT, 'fixtures/companies.csv'), join(work, 'crm.csv'));
    copyFileSync(join(ROOT, 'fixtures/v0.1/crm.csv.enrich-journal'), join(work, 'crm.csv.enrich-journal'));
    const env = { PATH: path, HOME: home, ENRICH_BASE_URL: sb.url, ENRICH_API_KEY: KEY, ...pgEnv };
    const run = async (doc: string, swap: (line: string) => string = (l) => l): Promise<{ out: string; err: string }> => {
      const script = shBlocks(doc).join('\n').split('\n').map(swap).join('\n');
      const r = await sh(`set -e\n${script}`, work, env).done;
      expect(r.code, `${doc}: ${r.err}`).toBe(0);
      return r;
    };

    // input-and-display.md: the CRM's website column, piped; JSON lines out, the summary to a file.
    await run('input-and-display.md');
    expect(readFileSync(join(work, 'enriched.jsonl'), 'utf8').trim().split('\n').length).toBeGreaterThan(100);
    expect(JSON.parse(readFileSync(join(work, 'run.json'), 'utf8'))).toMatchObject({ status: 'done' });

    // store-and-resume.md: the ledger's commands on the store that run made, and a query of it.
    const ledger = await run('store-and-resume.md');
    expect(ledger.out).toMatch(/^credits +138 spent over 1 run$/m);
    expect(ledger.out).toContain('crm.csv.enrich-journal: imported 4 companies');
    expect(ledger.out).toMatch(/would copy 142 companies, .* into backup\.db \(a new store\); nothing was written/);
    // The query, as the sqlite3 client prints it: domain|industry|when.
    expect(ledger.out).toMatch(/^[a-z0-9.-]+\|[A-Za-z ]+\|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$/m);
    expect(readFileSync(join(work, 'all.csv'), 'utf8').split('\n').length).toBeGreaterThan(100);

    // budgets.md: caps set, shown, one cleared.
    const budgets = await run('budgets.md');
    expect(budgets.out).toMatch(/5,000/);

    // team.md: a database made, named for the shell, and a laptop's store copied in (a dry run first).
    await run('team.md', (l) => l.replace(TEAM_STORE_IN_DOCS, teamUrl.toString()).replace(/^createdb enrich_team$/, `createdb ${team}`));
    teamUrl.password = server.password;
    expect(Number((await sql(teamUrl.toString(), 'SELECT count(*) AS n FROM companies'))[0]?.['n'])).toBeGreaterThan(100);

    // sandbox.md: the server starts on a free port (the example's 4010 may be taken) and stops on
    // SIGTERM (exec: the signal goes to it, not to a shell left behind it).
    const [line, ...more] = shBlocks('sandbox.md');
    expect(more).toStrictEqual([]);
    const sandbox = sh(`exec ${(line as string).replace('--port 4010', '--port 0')}`, work, env);
    await new Promise<void>((resolve) => sandbox.child.stdout?.on('data', (c: Buffer) => c.toString().includes('listening on') && resolve()));
    sandbox.child.kill('SIGTERM');
    const stopped = await sandbox.done;
    expect(stopped.code, stopped.err).toBe(0);
    expect(stopped.out).toMatch(/rate limit 50 req\/s per key · fail rate 0\.05 · drop rate 0 · latency 20 ms/);
    expect(stopped.out).toMatch(/1,000 credits/);
  });
});
