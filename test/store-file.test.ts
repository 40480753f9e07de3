import { execFileSync } from 'node:child_process';
import { closeSync, existsSync, linkSync, mkdirSync, openSync, readdirSync, readFileSync, rmSync, statSync, writeSync, writeFileSync } from 'node:fs';
import Database from 'libsql';
import { describe, expect, it } from 'vitest';
import { csvText, runCli } from './helpers/cli.js';
import { sandboxSuite } from './helpers/sandbox-suite.js';
import { runProcess, spawnCli } from './helpers/spawn.js';

/**
 * Issue 19 items 6 to 9 and 11: what --store may name, what is found there, and what other paths
 * may not be. Refusals come before anything is sent: the sandbox's ledger is the proof.
 */
const KEY = 'sk_test_store_file_0123456789';
const t = sandboxSuite(KEY);
const domains = (n: number): string[] => [...t.sb.directory].slice(0, n).map((c) => c.domain);

/** A store that bought `n` companies, and the input that bought them. */
async function boughtStore(n: number): Promise<{ store: string; input: string }> {
  const input = t.dir.file('in.csv', csvText([['domain'], ...domains(n).map((d) => [d])]));
  const store = t.dir.file('store.db');
  // In a process of its own: libsql frees a connection only when its statements are collected,
  // and one left open in this process could write into the store after the test damages it.
  const run = await runProcess([input, '-o', t.dir.file('out.csv'), '--store', store, '--quiet'], { env: t.env() });
  expect(run.code, run.stderr).toBe(0);
  expect(t.sb.ledger(KEY)).toHaveLength(n);
  return { store, input };
}

// Issue 19, item 6.
describe('what is at the store path', () => {
  it('refuses a store truncated to 0 bytes in one line, leaving it as it is, buying nothing', async () => {
    await t.sandbox();
    const { store, input } = await boughtStore(3);
    writeFileSync(store, '');
    for (const extra of ['-wal', '-shm']) rmSync(`${store}${extra}`, { force: true });
    const run = await runCli([input, '-o', t.dir.file('out.csv'), '--store', store], { env: t.env() });
    expect(run).toMatchObject({ code: 2, stdout: '' });
    expect(run.stderr).toBe(
      `enrich: the store ${store} is an empty file, not a store (a truncated copy?): if it held your purchases, restore it from a backup; else remove it, and a run makes a new store there\n`,
    );
    expect(statSync(store).size).toBe(0);
    expect(t.sb.ledger(KEY)).toHaveLength(3);
    expect(t.sb.stats.matchCalls.size).toBe(3);
  });

  it('refuses a foreign SQLite database and a non-SQLite file, writing to neither', async () => {
    await t.sandbox();
    const input = t.dir.file('in.csv', csvText([['domain'], ...domains(2).map((d) => [d])]));
    const other = t.dir.file('notes.db');
    const db = new Database(other);
    db.exec("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('keep me')");
    db.close();
    const text = t.dir.file('notes.txt', 'these are notes, not a database; '.repeat(100));
    const before = new Map([other, text].map((p) => [p, readFileSync(p)]));
    const notStore = await runCli([input, '--store', other, '--quiet'], { env: t.env() });
    expect(notStore).toMatchObject({ code: 2, stdout: '' });
    expect(notStore.stderr).toBe(`enrich: the store ${other} is not an enrich store (an SQLite database without enrich's store id); give --store (or ENRICH_STORE) the path of your store, or of a new one\n`);
    const notSqlite = await runCli([input, '--store', text, '--quiet'], { env: t.env() });
    expect(notSqlite.code).toBe(2);
    expect(notSqlite.stderr).toMatch(new RegExp(`^enrich: the store ${text} is damaged or not an enrich store \\(SQLite: file is not a database\\): if it held your purchases, move it aside and restore it from a backup; else give --store \\(or ENRICH_STORE\\) another path\\n$`));
    for (const [path, bytes] of before) expect(readFileSync(path).equals(bytes), path).toBe(true);
    // Nor a -wal, -shm or -journal beside them: SQLite never wrote.
    expect(readdirSync(t.dir.path).filter((n) => n.startsWith('notes.') && !before.has(`${t.dir.path}/${n}`))).toStrictEqual([]);
    expect(t.sb.stats.requests).toBe(0);
  });

  it('is made complete and owner-only by exactly one of several runs starting on it at once', async () => {
    await t.sandbox();
    const store = t.dir.file('new.db');
    const runs = [0, 1, 2, 3].map((i) => {
      const input = t.dir.file(`in${i}.csv`, csvText([['domain'], ...domains(4).map((d) => [d])]));
      return spawnCli([input, '-o', t.dir.file(`out${i}.csv`), '--store', store, '--quiet'], { env: t.env() });
    });
    for (const run of runs) expect(await run.exited, run.stderr()).toBe(0);
    expect(statSync(store).mode & 0o777).toBe(0o600);
    // One store, one identity: every run's keys derive from it, so each company was bought once.
    const db = new Database(store);
    try {
      expect(db.prepare("SELECT count(*) FROM meta WHERE key = 'store_id'").raw(true).get()).toStrictEqual([1]);
      expect(db.prepare('SELECT count(*) FROM runs').raw(true).get()).toStrictEqual([4]);
    } finally {
      db.close();
    }
    for (const [domain, n] of t.sb.chargesByDomain(KEY)) expect(n, domain).toBe(1);
    // No half-made store left behind under its temporary name.
    expect(readdirSync(t.dir.path).filter((n) => n.includes('enrich-new'))).toStrictEqual([]);
  });
});

/** Overwrites the root page of `table` with junk, once a checkpoint has put all of the store in its file. */
function damageTable(store: string, table: string): void {
  const db = new Database(store);
  let root: number;
  let pageSize: number;
  try {
    db.exec('PRAGMA wal_checkpoint(TRUNCATE)');
    root = (db.prepare('SELECT rootpage FROM sqlite_master WHERE name = ?').raw(true).get(table) as [number])[0];
    pageSize = (db.prepare('PRAGMA page_size').raw(true).get() as [number])[0];
  } finally {
    db.close();
  }
  const fd = openSync(store, 'r+');
  writeSync(fd, Buffer.alloc(pageSize, 0x5a), 0, pageSize, (root - 1) * pageSize);
  closeSync(fd);
}

// Issue 19, item 7.
describe('a damaged store', () => {
  const what = 'Move it aside and restore it from a backup (`enrich doctor --store <path>` checks one); a new store there would buy again everything this one held';

  it('found when opened: says so and what to do, exit 2, nothing sent', async () => {
    await t.sandbox();
    const { store, input } = await boughtStore(3);
    damageTable(store, 'meta');
    const requests = t.sb.stats.requests;
    const run = await runCli([input, '-o', t.dir.file('out.csv'), '--store', store], { env: t.env() });
    expect(run).toMatchObject({ code: 2, stdout: '' });
    expect(run.stderr).toBe(`enrich: the store ${store} is damaged (SQLite: database disk image is malformed); nothing was sent. ${what}\n`);
    expect(t.sb.stats.requests).toBe(requests);
  });

  it('found by a run at work: says so and what to do, exit 1; doctor and ledger say it too', async () => {
    await t.sandbox();
    const { store, input } = await boughtStore(3);
    damageTable(store, 'companies');
    const run = await runCli([input, '-o', t.dir.file('out.csv'), '--store', store], { env: t.env() });
    expect(run.code, run.stderr).toBe(1);
    expect(run.stderr).toBe(
      `enrich: the store ${store} is damaged (SQLite: database disk image is malformed); the run stopped, and what it bought since it began may not be recorded. ${what}\n`,
    );
    expect(t.sb.ledger(KEY)).toHaveLength(3);
    const ledger = await runCli(['ledger', '--store', store]);
    expect(ledger).toMatchObject({ code: 2, stderr: `enrich: the store ${store} is damaged (SQLite: database disk image is malformed); nothing was sent. ${what}\n` });
    // doctor has SQLite check every page, and fails the store as a batch would.
    const doctor = await runCli(['doctor', '--sandbox', '--store', store]);
    expect(doctor.code, doctor.stdout).toBe(2);
    expect(doctor.stdout).toMatch(new RegExp(`\\n  store +FIX +${store} is damaged \\(SQLite's integrity check: .+\\): move it aside and restore it from a backup; a batch would fail on it\\n`));
  });
});

/** Whether this process may mount a tmpfs (root with the right to mount): only then is a real read-only mount made. */
function canMount(): boolean {
  if (process.platform !== 'linux' || process.getuid?.() !== 0) return false;
  const probe = t.dir.file('probe');
  mkdirSync(probe);
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', probe], { stdio: 'ignore' });
    execFileSync('umount', [probe], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

const remount = (dir: string, mode: 'ro' | 'rw'): void => void execFileSync('mount', ['-o', `remount,${mode}`, dir]);

// Issue 19, item 9.
describe('a store on a read-only mount', () => {
  it('is read by ledger and doctor, -wal left or not, and a batch says it cannot write it', async (ctx) => {
    await t.sandbox();
    ctx.skip(!canMount(), 'needs root with the right to mount a tmpfs, to make a real read-only mount (root ignores chmod)');
    const mnt = t.dir.file('mnt');
    mkdirSync(mnt);
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=16m', 'tmpfs', mnt]);
    try {
      const store = `${mnt}/store.db`;
      const input = t.dir.file('in.csv', csvText([['domain'], ...domains(3).map((d) => [d])]));
      // The batches run as processes: one in this process would hold the store open for writing,
      // and the mount busy (libsql frees a connection only when its statements are collected).
      expect((await runProcess([input, '-o', t.dir.file('out.csv'), '--store', store], { env: t.env() })).code).toBe(0);
      const reads = async (): Promise<void> => {
        const show = await runCli(['ledger', '--store', store, '--json']);
        expect(show.code, show.stderr).toBe(0);
        expect(JSON.parse(show.stdout)).toMatchObject({ services: [{ companies: 3 }] });
        expect((await runCli(['ledger', 'runs', '--store', store])).code).toBe(0);
        const exported = await runCli(['ledger', 'export', '--store', store, '-o', t.dir.file('all.jsonl')]);
        expect(exported.code, exported.stderr).toBe(0);
        expect(readFileSync(t.dir.file('all.jsonl'), 'utf8').trim().split('\n')).toHaveLength(3);
        const doctor = await runCli(['doctor', '--sandbox', '--store', store]);
        expect(doctor.stdout).toMatch(/\n {2}store +ok +.*SQLite's integrity check: ok/);
      };
      // As a run left it: its process ended with the -wal and -shm beside the store.
      remount(mnt, 'ro');
      await reads();
      const batch = await runProcess([input, '-o', t.dir.file('out2.csv'), '--store', store], { env: t.env() });
      expect(batch).toMatchObject({ code: 2, stderr: `enrich: cannot use the store ${store}: permission denied or read-only; pass --store <path> to use another\n` });
      // Closed cleanly (checkpointed, no -wal or -shm left), as a backup or a snapshot is.
      remount(mnt, 'rw');
      const db = new Database(store);
      db.exec('PRAGMA wal_checkpoint(TRUNCATE)');
      db.close();
      expect(existsSync(`${store}-wal`)).toBe(false);
      remount(mnt, 'ro');
      await reads();
      expect(readdirSync(mnt).filter((n) => n.startsWith('store.db'))).toStrictEqual(['store.db']);
      expect(t.sb.ledger(KEY)).toHaveLength(3);
    } finally {
      execFileSync('umount', ['-l', mnt]);
    }
  });
});

// Issue 19, item 8.
describe('what --store and ENRICH_STORE may name', () => {
  it('a plain file path only: an SQLite URI, :memory: and the like are refused, making no file', async () => {
    await t.sandbox();
    const input = t.dir.file('in.csv', csvText([['domain'], ...domains(2).map((d) => [d])]));
    const cwd = t.dir.path;
    const plain = (source: string, value: string): string => `enrich: ${source} ${value}: give the store as a plain file path (not an SQLite URI, :memory: or another address)\n`;
    const cases: [string[], Record<string, string>, string][] = [
      [['--store', 'file:x.db'], {}, plain('--store', 'file:x.db')],
      [['--store', 'file:x.db?mode=rwc'], {}, plain('--store', 'file:x.db?mode=rwc')],
      [['--store', ':memory:'], {}, plain('--store', ':memory:')],
      [['--store', 'libsql://db.example.com'], {}, plain('--store', 'libsql://db.example.com')],
      [[], { ENRICH_STORE: 'file:x.db' }, plain('ENRICH_STORE', 'file:x.db')],
      [[], { ENRICH_STORE: ':memory:' }, plain('ENRICH_STORE', ':memory:')],
    ];
    for (const [args, env, stderr] of cases) {
      const run = await runCli([input, '-o', 'x.db', ...args], { env: t.env(env), cwd });
      expect(run, JSON.stringify([args, env])).toMatchObject({ code: 2, stdout: '', stderr });
    }
    const ledger = await runCli(['ledger', '--store', 'file:x.db'], { cwd });
    expect(ledger).toMatchObject({ code: 2, stderr: plain('--store', 'file:x.db') });
    const doctor = await runCli(['doctor', '--sandbox', '--store', ':memory:'], { cwd });
    expect(doctor.code).toBe(2);
    expect(doctor.stdout).toContain(`  store      FIX   --store :memory:: give the store as a plain file path`);
    expect(readdirSync(cwd).sort()).toStrictEqual(['in.csv']);
    expect(t.sb.stats.requests).toBe(0);
  });

  it('a postgres:// address is the team store; unreachable: exit 6, host named, no password', async () => {
    await t.sandbox();
    const input = t.dir.file('in.csv', csvText([['domain'], ...domains(1).map((d) => [d])]));
    for (const [args, env] of [
      [['--store', 'postgres://enrich:s3cret@127.0.0.1:1/enrich'], {}],
      [[], { ENRICH_STORE: 'postgresql://enrich:s3cret@127.0.0.1:1/enrich' }],
    ] as const) {
      const run = await runCli([input, ...args], { env: t.env(env) });
      expect(run).toMatchObject({
        code: 6,
        stdout: '',
        stderr: 'enrich: cannot reach the team store at 127.0.0.1:1: connection refused (is PostgreSQL running there?); nothing was sent to the service, rerun the same command later\n',
      });
      expect(run.stderr).not.toContain('s3cret');
    }
    expect(t.sb.stats.requests).toBe(0);
  });
});

// Issue 19, item 11.
describe('paths that are the input or the store under another name', () => {
  // The outputs: --summary-json, -o and ledger export -o.
  it('refuses outputs through a hard link of the input or the store, leaving both as they were', async () => {
    await t.sandbox();
    const { store, input } = await boughtStore(2);
    const inputLink = t.dir.file('input-link.csv');
    linkSync(input, inputLink);
    const storeLink = t.dir.file('store-link.csv');
    linkSync(store, storeLink);
    const before = [readFileSync(input), readFileSync(store)];
    const requests = t.sb.stats.requests;
    const refused = async (args: string[], stderr: string): Promise<void> => {
      const run = await runCli(args, { env: t.env() });
      expect(run, args.join(' ')).toMatchObject({ code: 2, stdout: '', stderr });
    };
    await refused([input, '-o', t.dir.file('out.csv'), '--store', store, '--summary-json', inputLink], `enrich: --summary-json and the input are the same file (${inputLink}); give each its own path\n`);
    await refused([input, '-o', inputLink, '--store', store], `enrich: -o and the input are the same file (${inputLink}); give each its own path\n`);
    await refused([input, '-o', storeLink, '--store', store], `enrich: -o and the store are the same file (${storeLink}); give each its own path\n`);
    await refused([input, '-o', t.dir.file('out.csv'), '--store', store, '--summary-json', storeLink], `enrich: --summary-json and the store are the same file (${storeLink}); give each its own path\n`);
    await refused(['ledger', 'export', '--store', store, '-o', storeLink], `enrich: -o ${storeLink} is the store itself; give the export another path\n`);
    expect(readFileSync(input).equals(before[0] as Buffer)).toBe(true);
    expect(readFileSync(store).equals(before[1] as Buffer)).toBe(true);
    expect(t.sb.stats.requests).toBe(requests);
    // A file that only looks alike is not the same file: a copy of the input takes the summary.
    const copy = t.dir.file('copy.csv', readFileSync(input, 'utf8'));
    const run = await runCli([input, '-o', t.dir.file('out.csv'), '--store', store, '--summary-json', copy, '--quiet'], { env: t.env() });
    expect(run.code, run.stderr).toBe(0);
    expect(JSON.parse(readFileSync(copy, 'utf8'))).toMatchObject({ rows: 2 });
  });
});
