import { copyFileSync, existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { startSandbox, type Sandbox } from '../src/sandbox/index.js';
import { tempDir } from './helpers/cli.js';
import { sql } from './helpers/postgres.js';
import { ROOT, sh, workspace } from './helpers/shell.js';

/**
 * Every command the README shows is run here, as written: its `sh` blocks in order, in one shell
 * with `set -e`, as a newcomer would type them (the example address and key swapped for a
 * sandbox's), and its crontab line under `env -i` with no terminal, as cron runs it.
 */
const README = readFileSync(join(ROOT, 'README.md'), 'utf8');
const KEY = 'sk_test_readme_0123456789';
const URL_IN_README = 'https://data.example.com';
const TEAM_STORE_IN_README = 'postgres://analyst@db.example.com/enrich_team';
// Run by the test runner itself, not by this file: installing, and the suite this test is part of.
const SET_UP_ONLY = ['npm install', 'npm test'];

const blocks = (lang: string): string[] => [...README.matchAll(new RegExp('```' + lang + '\\n([\\s\\S]*?)```', 'g'))].map((m) => m[1] as string);
const command = (line: string): string => line.replace(/\s+#.*$/, '').trim();

let sb: Sandbox;
let dir: ReturnType<typeof tempDir>;
beforeAll(async () => {
  sb = await startSandbox({ keys: [{ key: KEY }] });
  dir = tempDir('enrich-readme-');
});
afterAll(async () => {
  await sb.close();
  dir.cleanup();
});

describe("the README's commands", () => {
  it('run as written, in order: the sandbox demo, the analyst, finance, doctor, the ledger', async () => {
    const lines = blocks('sh').flatMap((b) => b.split('\n')).map(command).filter((l) => l !== '');
    const exempt = lines.filter((l) => SET_UP_ONLY.some((s) => l === s));
    expect(exempt).toEqual(SET_UP_ONLY);
    // The team store: a database of its own on the suite's PostgreSQL, made by the README's createdb.
    const server = new URL(inject('postgresUrl'));
    const team = `enrich_readme_${process.pid}_${Date.now()}`;
    const teamUrl = new URL(server);
    teamUrl.pathname = `/${team}`;
    teamUrl.password = '';
    const pgEnv = { PGHOST: server.hostname, PGPORT: server.port, PGUSER: decodeURIComponent(server.username), PGPASSWORD: decodeURIComponent(server.password) };
    const script = lines
      .filter((l) => !exempt.includes(l))
      .map((l) => l.replace(URL_IN_README, sb.url).replace('ENRICH_API_KEY=...', `ENRICH_API_KEY=${KEY}`).replace(TEAM_STORE_IN_README, teamUrl.toString()).replace(/^createdb enrich_team$/, `createdb ${team}`));
    expect(script).toContain(`createdb ${team}`);
    expect(script).toContain('enrich companies.csv -o enriched.csv');
    expect(script).toContain('enrich doctor');

    // A working folder with the clone's bin and fixtures, a CRM export, and `enrich` on the PATH
    // as `npm install -g .` would put it.
    const { work, home, path } = workspace(dir.path);
    symlinkSync(join(ROOT, 'bin'), join(work, 'bin'));
    symlinkSync(join(ROOT, 'fixtures'), join(work, 'fixtures'));
    copyFileSync(join(ROOT, 'fixtures/companies.csv'), join(work, 'companies.csv'));
    const r = await sh(['set -e', ...script].join('\n'), work, { PATH: path, HOME: home, ...pgEnv }).done;
    expect(r.code, r.err).toBe(0);
    expect(r.err).toContain('enrich: done');
    expect(r.err).toContain('adds to bill');
    expect(r.out).toMatch(/key +ok/);
    expect(r.out).toMatch(/companies\.csv +166 +done/);
    expect(readFileSync(join(work, 'enriched.csv'), 'utf8').split('\n').length).toBeGreaterThan(166);
    // The laptop's purchases were copied into the team store, so the team's run bought nothing,
    // and was recorded with who ran it; spend names the person.
    teamUrl.password = server.password;
    expect(await sql(teamUrl.toString(), 'SELECT status, credits, "user" IS NOT NULL AS who FROM runs ORDER BY id DESC LIMIT 1')).toStrictEqual([{ status: 'done', credits: 0, who: true }]);
    // The demo's play credits stayed in the sandbox's own store: the copy brought none to the team.
    expect(await sql(teamUrl.toString(), "SELECT name FROM services WHERE name = 'sandbox:embedded'")).toStrictEqual([]);
    expect(existsSync(join(home, '.local/state/enrich/sandbox.db'))).toBe(true);
    expect(r.out).toMatch(/^total +\d+/m);
  });

  it('the crontab line runs under env -i with no terminal; a failed run keeps the old results', async () => {
    const [block] = blocks('crontab');
    const entries = (block as string).split('\n').filter((l) => l.trim() !== '' && !l.startsWith('#'));
    const env = Object.fromEntries(entries.filter((l) => /^[A-Z_]+=/.test(l)).map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1).replace(URL_IN_README, sb.url)]));
    const job = entries.find((l) => /^[\d*]/.test(l)) as string;
    const fields = job.split(/\s+/);
    expect(fields.slice(0, 5)).toEqual(['15', '6', '*', '*', '*']);
    const crm = join(dir.path, 'crm');
    const keyFile = join(dir.path, 'key');
    const cronHome = join(dir.path, 'cron-home');
    mkdirSync(crm);
    mkdirSync(cronHome);
    copyFileSync(join(ROOT, 'fixtures/companies.csv'), join(crm, 'crm.csv'));
    writeFileSync(keyFile, `${KEY}\n`, { mode: 0o600 });
    const cmd = job
      .slice(job.indexOf(fields[5] as string))
      .replace('/home/ana/crm', crm)
      .replace('/usr/bin/node', process.execPath)
      .replace('/opt/enrich', ROOT.replace(/\/$/, ''))
      .replace('/home/ana/.config/enrich/key', keyFile);
    // What cron gives a job: HOME, LOGNAME, SHELL, PATH=/usr/bin:/bin, and the crontab's variables.
    const cron = { HOME: cronHome, LOGNAME: 'ana', SHELL: '/bin/sh', PATH: '/usr/bin:/bin', ...env };
    const first = await sh(cmd, cronHome, cron).done;
    expect(first.code, first.err + readFileSync(join(crm, 'enrich.log'), 'utf8')).toBe(0);
    expect(first.out + first.err).toBe('');
    expect(readFileSync(join(crm, 'enrich.log'), 'utf8')).toBe('');
    const results = readFileSync(join(crm, 'enriched.jsonl'), 'utf8');
    expect(results.trim().split('\n')).toHaveLength(166);
    expect(JSON.parse(readFileSync(join(crm, 'run.json'), 'utf8'))).toMatchObject({ status: 'done', rows: 166 });

    // Tomorrow's export names a new company and the key is wrong: the run fails (exit 5), says
    // why in the log, and yesterday's results stay as they were.
    writeFileSync(join(crm, 'crm.csv'), `${readFileSync(join(crm, 'crm.csv'), 'utf8')}9999,New Co,https://${[...sb.directory].at(-1)?.domain ?? 'x.com'}/,Ana,\n`);
    writeFileSync(keyFile, 'sk_wrong_key_000000\n');
    const second = await sh(cmd, cronHome, cron).done;
    expect(second.code).toBe(5);
    expect(readFileSync(join(crm, 'enrich.log'), 'utf8')).toMatch(/refused the API key/);
    expect(readFileSync(join(crm, 'enriched.jsonl'), 'utf8')).toBe(results);
  });

  it('is short: at most about 12 KB, and links every doc', () => {
    expect(Buffer.byteLength(README)).toBeLessThanOrEqual(12 * 1024);
    for (const doc of ['money', 'input-and-display', 'output', 'failures', 'doctor', 'store-and-resume', 'team', 'rate-limits-and-performance', 'sandbox', 'layout', 'budgets']) {
      expect(README).toContain(`(docs/${doc}.md`);
      expect(readFileSync(join(ROOT, 'docs', `${doc}.md`), 'utf8')).toContain('../README.md');
    }
  });
});
