import { connect as connectTcp, createServer, type AddressInfo, type Socket } from 'node:net';
import { describe, expect, it } from 'vitest';
import pg from 'pg';
import { MAINTENANCE_LOCK, MIGRATIONS, NOW_MS, SCHEMA_VERSION } from '../src/store/postgres/schema.js';
import { PgLedger } from '../src/store/postgres/ledger.js';
import { PgStore, TABLE_WAIT_MS } from '../src/store/postgres/store.js';
import { csvText, readCsvFile, runCli } from './helpers/cli.js';
import { READ_ONLY, roleSuite } from './helpers/pg-roles.js';
import { advisoryLocks, freshDatabase, lockWaits, sql } from './helpers/postgres.js';
import { sandboxSuite } from './helpers/sandbox-suite.js';
import { runProcess, spawnCli } from './helpers/spawn.js';

/**
 * Issue 21: a batch on the team store that cannot go ahead says why in one line, with its exit
 * code, before anything reaches the service (the sandbox's request count is the proof); one that
 * can, on an older schema or racing another machine to make it, goes ahead on one schema.
 */
const KEY = 'sk_test_team_failures_0123456789';
const t = sandboxSuite(KEY);
const domains = (n: number): string[] => [...t.sb.directory].slice(0, n).map((c) => c.domain);

const roles = roleSuite();

/** A store made by a run of this enrich (one company bought), and the input it ran. */
async function madeStore(url: string): Promise<string> {
  const input = t.dir.file('in.csv', csvText([['domain'], ...domains(2).map((d) => [d])]));
  const run = await runCli([input, '-o', t.dir.file('first.csv'), '--store', url, '--quiet'], { env: t.env() });
  expect(run.code, run.stderr).toBe(0);
  return input;
}

/** A database whose schema is at version 1, as the first builds of the team store made it. */
async function storeAtVersion1(): Promise<string> {
  const url = await freshDatabase();
  await sql(url, MIGRATIONS[0] as string);
  await sql(url, "INSERT INTO meta (key, value) VALUES ('schema_version', '1'), ('store_id', '00112233aabbccdd'), ('created_at', '0')");
  return url;
}

/** Every row of enrich's tables, to show that a refused run changed nothing. */
async function contents(url: string): Promise<unknown> {
  const tables = ['meta', 'services', 'lookups', 'companies', 'purchases', 'runs', 'imports'];
  return Object.fromEntries(await Promise.all(tables.map(async (name) => [name, await sql(url, `SELECT * FROM ${name} ORDER BY 1, 2`)])));
}

// From issue 21.
describe('a batch on the team store that cannot go ahead', () => {
  // A setting, not an outage: one line, with no driver warning.
  it('sslmode as psql reads it: require without server TLS is exit 2 in one line; disable works', async () => {
    await t.sandbox();
    const url = await freshDatabase();
    const input = t.dir.file('ssl.csv', csvText([['domain'], ...domains(2).map((d) => [d])]));
    const requests = t.sb.stats.requests;
    const { port } = new URL(url);
    // In the address, or in PGSSLMODE (as psql reads it) for an address without one.
    const tries: [string, Record<string, string>][] = ['require', 'prefer', 'verify-full', 'no-verify'].map((mode) => {
      const address = new URL(url);
      address.searchParams.set('sslmode', mode);
      return [address.toString(), {}];
    });
    tries.push([url, { PGSSLMODE: 'require' }]);
    for (const [address, env] of tries) {
      // PGSSLMODE is read by pg from the process's environment: that case runs as a process.
      const run = await (env['PGSSLMODE'] === undefined ? runCli : runProcess)([input, '-o', t.dir.file('ssl-out.csv'), '--store', address], { env: { ...t.env(), ...env } });
      expect(run.code, run.stderr).toBe(2);
      expect(run.stderr).toMatch(new RegExp(`^enrich: the team store at 127\\.0\\.0\\.1:${port} (takes no TLS connections and the address asks for them|.*does not support SSL)`));
      expect(run.stderr.trimEnd().split('\n')).toHaveLength(1);
      const doctor = await (env['PGSSLMODE'] === undefined ? runCli : runProcess)(['doctor', '--sandbox', '--store', address], { env });
      expect(doctor.code).toBe(2);
    }
    const ca = new URL(url);
    ca.searchParams.set('sslmode', 'verify-ca');
    const verifyCa = await runCli([input, '-o', t.dir.file('ssl-out.csv'), '--store', ca.toString()], { env: t.env() });
    expect(verifyCa).toMatchObject({ code: 2, stderr: 'enrich: sslmode=verify-ca checks the server against a CA of your own: add sslrootcert=<file> to the address (or use verify-full, against the system CAs)\n' });
    expect((await runCli(['doctor', '--sandbox', '--store', ca.toString()])).stdout).toContain('sslmode=verify-ca checks the server against a CA of your own');
    expect(t.sb.stats.requests).toBe(requests);
    const plain = new URL(url);
    plain.searchParams.set('sslmode', 'disable');
    const ok = await runCli([input, '-o', t.dir.file('ssl-out.csv'), '--store', plain.toString(), '--quiet'], { env: t.env() });
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.stderr).toBe('');
  });

  it('a role that cannot write: one line naming the grant it needs, exit 2, nothing sent', async () => {
    await t.sandbox();
    const url = await freshDatabase();
    const input = await madeStore(url);
    const reader = await roles.role(url, READ_ONLY(url));
    const requests = t.sb.stats.requests;
    const before = await contents(url);
    // --max-age 1s: everything held is stale, so this run would buy again if it could write.
    const run = await runCli([input, '-o', t.dir.file('out.csv'), '--store', reader.url, '--max-age', '1s'], { env: t.env() });
    const { port, pathname } = new URL(url);
    const r = reader.name;
    expect(run).toMatchObject({
      code: 2,
      stdout: '',
      stderr:
        `enrich: the role ${r} cannot write the team store ${pathname.slice(1)} on 127.0.0.1:${port} (no INSERT on services, and 12 more); ` +
        `the tables' owner can grant what a run needs: GRANT SELECT, INSERT, UPDATE ON services, lookups, companies, purchases, runs, imports TO ${r}; ` +
        `GRANT SELECT ON meta, budgets TO ${r}; GRANT USAGE ON SEQUENCE services_id_seq, runs_id_seq TO ${r}; nothing was sent to the service\n`,
    });
    expect(run.stderr).not.toContain('role-s3cret-pw');
    expect(t.sb.stats.requests).toBe(requests);
    expect(await contents(url)).toStrictEqual(before);
    // The grant it names is enough: the same command then runs.
    const grants = /can grant what a run needs: (.*); nothing was sent/.exec(run.stderr)?.[1] ?? '';
    for (const grant of grants.split('; ')) await sql(url, grant);
    // No more than that is asked for: a service's row is only ever added, never updated.
    await sql(url, `REVOKE UPDATE ON services FROM ${r}`);
    const granted = await runCli([input, '-o', t.dir.file('out.csv'), '--store', reader.url, '--quiet'], { env: t.env() });
    expect(granted.code, granted.stderr).toBe(0);
  });

  it('a role that may not create tables, no schema or an older one: exit 2, nothing changed', async () => {
    await t.sandbox();
    const input = t.dir.file('in.csv', csvText([['domain'], ...domains(1).map((d) => [d])]));
    const empty = await freshDatabase();
    const stranger = await roles.role(empty, READ_ONLY(empty));
    const first = await runCli([input, '--store', stranger.url], { env: t.env() });
    expect(first.code, first.stderr).toBe(2);
    expect(first.stderr).toMatch(
      new RegExp(`^enrich: the role ${stranger.name} cannot create the schema of the team store in \\S+ on 127\\.0\\.0\\.1:\\d+ \\(permission denied for schema public\\); run enrich once as the database's owner, who may then let ${stranger.name} in: GRANT .*; nothing was sent to the service\\n$`),
    );
    expect(await sql(empty, "SELECT count(*)::int AS n FROM pg_tables WHERE schemaname = 'public'")).toStrictEqual([{ n: 0 }]);
    const old = await freshDatabase();
    await sql(old, MIGRATIONS[0] as string);
    await sql(old, "INSERT INTO meta (key, value) VALUES ('schema_version', '1'), ('store_id', '00112233aabbccdd')");
    const reader = await roles.role(old, READ_ONLY(old));
    const behind = await runCli([input, '--store', reader.url], { env: t.env() });
    expect(behind.code, behind.stderr).toBe(2);
    expect(behind.stderr).toMatch(new RegExp(`^enrich: the role ${reader.name} cannot upgrade the team store's schema \\(version 1 to ${SCHEMA_VERSION}\\) in .* \\(must be owner of table runs\\); run enrich once as the database's owner`));
    expect(await sql(old, "SELECT value FROM meta WHERE key = 'schema_version'")).toStrictEqual([{ value: '1' }]);
    expect(t.sb.stats.requests).toBe(0);
  });

  it('a store a newer enrich wrote: refused in one line, exit 2, nothing changed, nothing sent', async () => {
    await t.sandbox();
    const url = await freshDatabase();
    const input = await madeStore(url);
    await sql(url, "UPDATE meta SET value = '99' WHERE key = 'schema_version'");
    const requests = t.sb.stats.requests;
    const before = await contents(url);
    const run = await runCli([input, '-o', t.dir.file('out.csv'), '--store', url, '--max-age', '1s'], { env: t.env() });
    expect(run).toMatchObject({
      code: 2,
      stdout: '',
      stderr: `enrich: the team store ${new URL(url).pathname.slice(1)} on 127.0.0.1 was written by a newer enrich (schema 99); upgrade enrich to use it; nothing was sent to the service\n`,
    });
    expect(t.sb.stats.requests).toBe(requests);
    expect(await contents(url)).toStrictEqual(before);
  });

  it('a wrong password is never shown; a missing database names createdb; both exit 2', async () => {
    await t.sandbox();
    const url = await freshDatabase();
    const input = t.dir.file('in.csv', csvText([['domain'], ...domains(1).map((d) => [d])]));
    const wrong = new URL(url);
    wrong.password = 'not-the-pw-9f8e7d';
    const at = `127.0.0.1:${wrong.port}`;
    for (const [args, env] of [
      [['--store', wrong.toString()], {}],
      [[], { ENRICH_STORE: wrong.toString() }],
    ] as const) {
      const login = await runCli([input, ...args], { env: t.env(env) });
      expect(login).toMatchObject({
        code: 2,
        stdout: '',
        stderr: `enrich: the team store at ${at} refused the login (password authentication failed for user "postgres"); check the user and password (PGPASSWORD or ~/.pgpass); nothing was sent to the service\n`,
      });
      expect(login.stderr).not.toContain('not-the-pw-9f8e7d');
    }
    const missing = new URL(url);
    missing.pathname = '/enrich_no_such_db';
    const none = await runCli([input, '--store', missing.toString()], { env: t.env() });
    expect(none).toMatchObject({
      code: 2,
      stdout: '',
      stderr: `enrich: the team store at ${at} has no database enrich_no_such_db; create it (createdb enrich_no_such_db) or fix the address; nothing was sent to the service\n`,
    });
    expect(none.stderr).not.toContain(missing.password);
    expect(t.sb.stats.requests).toBe(0);
  });
});

// From issue 21.
describe('two versions of enrich on one database', () => {
  it('a schema at version 1 is upgraded by a run, keeping its store id and what it holds', async () => {
    await t.sandbox();
    const url = await storeAtVersion1();
    const input = t.dir.file('in.csv', csvText([['domain'], ...domains(2).map((d) => [d])]));
    const run = await runCli([input, '-o', t.dir.file('out.csv'), '--store', url, '--quiet'], { env: t.env() });
    expect(run.code, run.stderr).toBe(0);
    expect(await sql(url, "SELECT key, value FROM meta WHERE key IN ('schema_version', 'store_id') ORDER BY key")).toStrictEqual([
      { key: 'schema_version', value: String(SCHEMA_VERSION) },
      { key: 'store_id', value: '00112233aabbccdd' },
    ]);
    expect(await sql(url, 'SELECT "user" IS NOT NULL AS has_user FROM runs')).toStrictEqual([{ has_user: true }]);
    expect(readCsvFile(t.dir.file('out.csv')).map((r) => r['enrich_status'])).toStrictEqual(['matched', 'matched']);
  });

  it('an upgrade held up by a table lock: exit 6, nothing changed or queued; later it works', async () => {
    await t.sandbox();
    const url = await storeAtVersion1();
    const input = t.dir.file('in.csv', csvText([['domain'], ...domains(2).map((d) => [d])]));
    // A session in the middle of a read of runs (an analyst's psql): version 2 alters runs.
    const analyst = new pg.Client({ connectionString: url });
    await analyst.connect();
    try {
      await analyst.query('BEGIN');
      await analyst.query('SELECT count(*) FROM runs');
      const blocked = await runCli([input, '-o', t.dir.file('out.csv'), '--store', url, '--quiet'], { env: t.env() });
      expect(blocked).toMatchObject({ code: 6, stdout: '' });
      expect(blocked.stderr).toMatch(
        new RegExp(`^enrich: cannot upgrade the team store's schema \\(version 1 to ${SCHEMA_VERSION}\\) in \\S+ on 127\\.0\\.0\\.1:\\d+: another session has held one of its tables for ${TABLE_WAIT_MS / 1000} s \\(an open transaction, a dump\\), and the schema is as it was; run the same command once it is done; nothing was sent to the service\\n$`),
      );
      expect(t.sb.stats.requests).toBe(0);
      // Nothing is queued on runs now: another session's statement on it goes through while the
      // analyst still reads, and the server waits on no lock in this database.
      await sql(url, 'UPDATE runs SET heartbeat_at = heartbeat_at');
      expect(await lockWaits(url)).toBe(0);
    } finally {
      await analyst.query('COMMIT').catch(() => {});
      await analyst.end();
    }
    expect(await sql(url, "SELECT value FROM meta WHERE key = 'schema_version'")).toStrictEqual([{ value: '1' }]);
    const after = await runCli([input, '-o', t.dir.file('out.csv'), '--store', url, '--quiet'], { env: t.env() });
    expect(after.code, after.stderr).toBe(0);
    expect(await sql(url, "SELECT value FROM meta WHERE key = 'schema_version'")).toStrictEqual([{ value: String(SCHEMA_VERSION) }]);
  });

  // A ledger copy's lock: exit 6 in words, the server left waiting on nothing.
  it("an upgrade held up by another machine's maintenance lock gives up below the query timeout", async () => {
    const url = await storeAtVersion1();
    const copy = new pg.Client({ connectionString: url });
    await copy.connect();
    try {
      await copy.query('SELECT pg_advisory_lock($1)', [MAINTENANCE_LOCK]);
      // A query timeout of 2 s: the wait for the lock is half of it (30 s at the default 60).
      const opened = PgStore.open(url, { tool: 'test', queryTimeoutMs: 2_000 });
      await expect(opened).rejects.toMatchObject({
        kind: 'unavailable',
        message: expect.stringMatching(
          new RegExp(`^cannot upgrade the team store's schema \\(version 1 to ${SCHEMA_VERSION}\\) in \\S+ on 127\\.0\\.0\\.1:\\d+: another enrich has held the store's maintenance lock for 1 s \\(an upgrade, a \`ledger copy\` or \`ledger prune\`\\), and the schema is as it was; run the same command once it is done; nothing was sent to the service$`),
        ),
      });
      expect(await lockWaits(url)).toBe(0);
    } finally {
      await copy.end();
    }
    const store = await PgStore.open(url, { tool: 'test' });
    await store.close();
    expect(await sql(url, "SELECT value FROM meta WHERE key = 'schema_version'")).toStrictEqual([{ value: String(SCHEMA_VERSION) }]);
  });

  it("an upgrade chosen as a deadlock's victim is tried again", async () => {
    await t.sandbox();
    const url = await storeAtVersion1();
    // The server picks the victim of a real deadlock by the clock; this plays its answer instead:
    // the first ALTER TABLE fails as a deadlock's victim does (a sequence, which a rollback keeps).
    await sql(url, 'CREATE SEQUENCE alters');
    await sql(
      url,
      `CREATE FUNCTION victim() RETURNS event_trigger LANGUAGE plpgsql AS $$
         BEGIN IF nextval('alters') = 1 THEN RAISE EXCEPTION 'deadlock detected' USING ERRCODE = '40P01'; END IF; END $$`,
    );
    await sql(url, "CREATE EVENT TRIGGER victim ON ddl_command_start WHEN TAG IN ('ALTER TABLE') EXECUTE FUNCTION victim()");
    const input = t.dir.file('in.csv', csvText([['domain'], ...domains(2).map((d) => [d])]));
    const run = await runCli([input, '-o', t.dir.file('out.csv'), '--store', url, '--quiet'], { env: t.env() });
    expect(run.code, run.stderr).toBe(0);
    // The first ALTER failed, then the retry ran every step from version 1 (each ALTER TABLE of migrations 2 on).
    const alters = MIGRATIONS.slice(1).join('\n').match(/ALTER TABLE/g)?.length ?? 0;
    expect(await sql(url, 'SELECT last_value::int AS n FROM alters')).toStrictEqual([{ n: 1 + alters }]);
    expect(await sql(url, "SELECT value FROM meta WHERE key = 'schema_version'")).toStrictEqual([{ value: String(SCHEMA_VERSION) }]);
    await sql(url, 'DROP EVENT TRIGGER victim');
  });

  it('two machines opening a schema-less database at once share one schema and one store id', async () => {
    await t.sandbox();
    const url = await freshDatabase();
    const input = t.dir.file('in.csv', csvText([['domain'], ...domains(3).map((d) => [d])]));
    // The maintenance lock held here until both wait for it: both found no schema, and both would make it.
    const holder = new pg.Client({ connectionString: url });
    await holder.connect();
    let runs: ReturnType<typeof spawnCli>[] = [];
    try {
      await holder.query('SELECT pg_advisory_lock($1)', [MAINTENANCE_LOCK]);
      runs = ['a', 'b'].map((host) => spawnCli([input, '-o', t.dir.file(`${host}.csv`), '--store', url, '--quiet'], { env: t.env({ ENRICH_HOST: host }) }));
      await expect.poll(() => advisoryLocks(url, false), { timeout: 20_000 }).toBe(2);
      await holder.query('SELECT pg_advisory_unlock($1)', [MAINTENANCE_LOCK]);
    } finally {
      await holder.end();
    }
    const codes = await Promise.all(runs.map((r) => r.exited));
    expect(codes, runs.map((r) => r.stderr()).join('\n')).toStrictEqual([0, 0]);
    expect(await sql(url, "SELECT key, value FROM meta WHERE key = 'schema_version'")).toStrictEqual([{ key: 'schema_version', value: String(SCHEMA_VERSION) }]);
    expect(await sql(url, "SELECT count(*)::int AS n FROM meta WHERE key = 'store_id'")).toStrictEqual([{ n: 1 }]);
    // One purchase per company, whichever machine made it.
    expect(t.sb.ledger(KEY)).toHaveLength(3);
    expect(await sql(url, 'SELECT host FROM runs ORDER BY host')).toStrictEqual([{ host: 'a' }, { host: 'b' }]);
  });
});

describe('ledger maintenance on the team store that another holds up', () => {
  const place = (url: string): string => {
    const { port, pathname } = new URL(url);
    return `${pathname.slice(1)} on 127\\.0\\.0\\.1:${port}`;
  };
  /** The team store's ledger, its query timeout 2 s: every wait for a lock is 1 s. */
  const ledger = (url: string): Promise<PgLedger> => PgLedger.open(url, { tool: 'test', now: () => Date.now(), env: {}, write: true, create: false, queryTimeoutMs: 2_000 });
  const ago = (days: number): number => Date.now() - days * 86_400_000;
  /** A store whose companies were all bought 30 days ago, its contents, another session on it, and its ledger. */
  const aged = async (): Promise<{ url: string; before: unknown; other: pg.Client; store: PgLedger }> => {
    await t.sandbox();
    const url = await freshDatabase();
    await madeStore(url);
    await sql(url, 'UPDATE companies SET bought_at = $1', [ago(30)]);
    const before = await contents(url);
    const other = new pg.Client({ connectionString: url });
    await other.connect();
    return { url, before, other, store: await ledger(url) };
  };

  // Given up below the query timeout, exit 6 in words naming the lock, the server left waiting on nothing.
  it('a prune or a copy gives up on a held maintenance lock, changing nothing, then goes ahead', async () => {
    const { url, before, other: copy, store } = await aged();
    try {
      await copy.query('SELECT pg_advisory_lock($1)', [MAINTENANCE_LOCK]);
      const held = (doing: string, left: string): RegExp =>
        new RegExp(`^cannot ${doing} in ${place(url)}: another enrich has held the store's maintenance lock for 1 s \\(an upgrade, a \`ledger copy\` or \`ledger prune\`\\); ${left}; run the same command once it is done$`);
      // Before: each waited out the 60 s query timeout, and said the connection was lost; the
      // server went on waiting for the lock after the client had gone.
      await expect(store.prune(ago(7), false)).rejects.toMatchObject({ kind: 'unavailable', message: expect.stringMatching(held('prune the team store', 'nothing was removed')) });
      expect(await lockWaits(url)).toBe(0);
      await expect(store.copyTarget(false)).rejects.toMatchObject({ kind: 'unavailable', message: expect.stringMatching(held('copy into the team store', 'nothing was copied')) });
      expect(await lockWaits(url)).toBe(0);
      expect(await contents(url)).toStrictEqual(before);
      await copy.query('SELECT pg_advisory_unlock($1)', [MAINTENANCE_LOCK]);
      // The same session goes on: neither wait left it in a transaction or holding anything.
      const bought = await sql<{ n: number }>(url, 'SELECT count(*)::int AS n FROM companies');
      await expect(store.prune(ago(7), false)).resolves.toMatchObject({ companies: bought[0]?.n });
      expect(await sql(url, 'SELECT count(*)::int AS n FROM companies')).toStrictEqual([{ n: 0 }]);
      const target = await store.copyTarget(false);
      expect(await advisoryLocks(url, true)).toBe(1);
      await target.end();
      expect((await advisoryLocks(url, true)) + (await advisoryLocks(url, false))).toBe(0);
    } finally {
      await store.close();
      await copy.end();
    }
  });

  // Rows held by an open transaction: given up after a shorter wait, in words; a run under way is still said as such.
  it('a prune or a copy chunk gives up on rows another session holds, keeping what was written', async () => {
    const { url, before, other: analyst, store } = await aged();
    const rowsHeld = (doing: string, left: string): RegExp =>
      new RegExp(`^cannot ${doing} in ${place(url)}: another session has held a table or rows it needs for 1 s \\(an open transaction\\); ${left}; run the same command once it is done$`);
    try {
      await analyst.query('BEGIN');
      await analyst.query('UPDATE runs SET status = status');
      // Before: 30 s queued for runs, every run's heartbeat queued behind it (a lease lost).
      await expect(store.prune(ago(7), false)).rejects.toMatchObject({ kind: 'unavailable', message: expect.stringMatching(rowsHeld('prune the team store', 'nothing was removed')) });
      expect(await lockWaits(url)).toBe(0);
      expect(await contents(url)).toStrictEqual(before);
      // A run under way on another machine: said before runs is waited for.
      const [service] = await sql<{ id: string; name: string }>(url, 'SELECT id, name FROM services');
      await sql(url, `INSERT INTO runs (service, started_at, heartbeat_at, pid, host, tool, dry_run, status) VALUES ($1, 0, ${NOW_MS}, 1, 'elsewhere', 'test', 0, 'running')`, [service?.id]);
      await expect(store.prune(ago(7), false)).rejects.toMatchObject({ name: 'UsageError', message: expect.stringMatching(/^a run is under way on this store \(run \d+\); prune when it has finished$/) });
      await analyst.query('ROLLBACK');
      // A chunk of a copy, on a row the analyst holds: before, 60 s, then "lost the connection",
      // its backend waiting on, holding the maintenance lock, after the process had gone.
      const [row] = await sql<{ domain: string }>(url, 'SELECT domain FROM lookups LIMIT 1');
      const newer = { domain: row?.domain as string, status: 'miss' as const, company: null, name: null, checkedAt: Date.now() };
      await analyst.query('BEGIN');
      await analyst.query('UPDATE lookups SET status = status WHERE domain = $1', [newer.domain]);
      const target = await store.copyTarget(false);
      await expect(target.lookups(service?.name as string, [newer])).rejects.toMatchObject({
        kind: 'unavailable',
        message: expect.stringMatching(rowsHeld('copy into the team store', 'what was copied before that is kept')),
      });
      expect(await lockWaits(url)).toBe(0);
      await analyst.query('ROLLBACK');
      await expect(target.lookups(service?.name as string, [newer])).resolves.toBe(1);
      await target.end();
    } finally {
      await analyst.query('ROLLBACK').catch(() => {});
      await analyst.end();
      await store.close();
    }
  });
});

/** A TCP proxy to PostgreSQL that a test can take down (every connection cut, new ones cut at once) and bring back up. */
async function breakableProxy(target: URL): Promise<{ url: string; down(): void; up(): void; close(): void }> {
  const sockets = new Set<Socket>();
  let isDown = false;
  const server = createServer((inbound) => {
    inbound.on('error', () => {});
    if (isDown) return void inbound.destroy();
    const outbound = connectTcp(Number(target.port), target.hostname);
    outbound.on('error', () => {});
    for (const s of [inbound, outbound]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
    }
    inbound.pipe(outbound).pipe(inbound);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = new URL(target);
  url.port = String((server.address() as AddressInfo).port);
  const cut = (): void => {
    for (const s of sockets) s.destroy();
  };
  return {
    url: url.toString(),
    down: () => ((isDown = true), cut()),
    up: () => void (isDown = false),
    close: () => (server.close(), cut()),
  };
}

describe('a team store lost mid-run and back', () => {
  /** A run of 60 companies on a team store behind a proxy, taken down once the run is buying; resolved once the run says it lost it. */
  async function lostUnderRun(): Promise<{ proxy: Awaited<ReturnType<typeof breakableProxy>>; input: string; run: ReturnType<typeof spawnCli> }> {
    await t.sandbox({ latencyMs: 30 });
    const proxy = await breakableProxy(new URL(await freshDatabase()));
    const input = t.dir.file('lost.csv', csvText([['domain'], ...domains(60).map((d) => [d])]));
    const run = spawnCli([input, '-o', t.dir.file('lost-out.csv'), '--store', proxy.url, '--quiet', '--concurrency', '4'], { env: t.env() });
    while (t.sb.ledger(KEY).length < 5 && run.child.exitCode === null) await new Promise((r) => setTimeout(r, 5));
    proxy.down();
    await run.waitFor('lost the team store').catch((error: unknown) => {
      proxy.close();
      throw error;
    });
    return { proxy, input, run };
  }

  it('says so off a terminal and with --quiet: a line when lost, one when back; it finishes', async () => {
    const { proxy, run } = await lostUnderRun();
    try {
      // It comes back once the run has said it lost it.
      proxy.up();
      expect(await run.exited, run.stderr()).toBe(0);
      // Off a terminal each such line carries the UTC time: a cron log says when the run stalled, and when it went on.
      expect(run.stderr()).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ enrich: lost the team store \(.+\); trying again for up to 30 s, and no new purchase starts meanwhile$/m);
      expect(run.stderr()).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ enrich: the team store answers again after \d+\.\d s; the run goes on$/m);
      expect(t.sb.ledger(KEY)).toHaveLength(60);
    } finally {
      proxy.close();
    }
  });

  it('interrupted while the store is out of reach, stops at once with 130, not later with 6', async () => {
    const { proxy, input, run } = await lostUnderRun();
    try {
      run.child.kill('SIGTERM');
      expect(await run.exited, run.stderr()).toBe(130);
      expect(run.stderr()).toMatch(/^enrich: interrupted while the team store could not be reached \(.+\); run the same command to finish: calls already sent resume under their keys, nothing is bought twice$/m);
      // Back up, the same command finishes, each company bought once.
      proxy.up();
      const again = await runCli([input, '-o', t.dir.file('lost-out.csv'), '--store', proxy.url, '--quiet'], { env: t.env() });
      expect(again.code, again.stderr).toBe(0);
      expect(new Set(t.sb.ledger(KEY).map((e) => e.domain)).size).toBe(t.sb.ledger(KEY).length);
    } finally {
      proxy.close();
    }
  });

  it('interrupted, then a blip while winding down: every answer paid for is still kept', async () => {
    await t.sandbox({ latencyMs: 30 });
    const url = await freshDatabase();
    const proxy = await breakableProxy(new URL(url));
    try {
      const input = t.dir.file('blip.csv', csvText([['domain'], ...domains(60).map((d) => [d])]));
      const run = spawnCli([input, '-o', t.dir.file('blip-out.csv'), '--store', proxy.url, '--quiet', '--concurrency', '4'], { env: t.env() });
      while (t.sb.ledger(KEY).length < 5 && run.child.exitCode === null) await new Promise((r) => setTimeout(r, 5));
      run.child.kill('SIGTERM');
      proxy.down();
      await run.waitFor('lost the team store');
      proxy.up();
      expect(await run.exited, run.stderr()).toBe(130);
      const charged = new Set(t.sb.ledger(KEY).map((e) => e.domain));
      const held = new Set((await sql(url, 'SELECT domain FROM companies')).map((r) => String(r['domain'])));
      expect([...charged].filter((d) => !held.has(d))).toStrictEqual([]);
    } finally {
      proxy.close();
    }
  });
});
