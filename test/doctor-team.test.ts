import { createServer } from 'node:net';
import { describe, expect, it } from 'vitest';
import { SKEW_NOTE_MS, teamStoreLines } from '../src/commands/doctor-team.js';
import type { TeamStoreState } from '../src/store/postgres/inspect.js';
import { MIGRATIONS, SCHEMA_VERSION } from '../src/store/postgres/schema.js';
import { PgStore } from '../src/store/postgres/store.js';
import { READ_ONLY, roleSuite } from './helpers/pg-roles.js';
import { freshDatabase, sql } from './helpers/postgres.js';
import { csvText, runCli, tempDir } from './helpers/cli.js';

/**
 * Issue 21: `enrich doctor` with a team store (--store or ENRICH_STORE postgres://...) says
 * whether a batch would work there, one line per check, and changes nothing to find out.
 */
const roles = roleSuite();

const doctor = (store: string, args: string[] = []) => runCli(['doctor', '--sandbox', ...args], { env: { ENRICH_STORE: store } });

/** The report's lines as { label: [status, text] }. */
function report(stdout: string): Map<string, [string, string]> {
  const lines = stdout.trimEnd().split('\n').slice(0, -1);
  return new Map(lines.map((l) => /^ {2}(\S+) +(ok|note|FIX) +(.*)$/.exec(l)).map((m) => [m?.[1] ?? '?', [m?.[2] ?? '?', m?.[3] ?? '?']]));
}
const storeLines = (stdout: string): [string, string, string][] => [...report(stdout)].filter(([label]) => TEAM_LABELS.includes(label)).map(([label, [status, text]]) => [label, status, text]);
const TEAM_LABELS = ['store', 'login', 'schema', 'writable', 'clock', 'identity'];

const shown = (url: string): string => {
  const u = new URL(url);
  u.password = '';
  return u.toString();
};
const place = (url: string): { at: string; database: string } => ({ at: `127.0.0.1:${new URL(url).port}`, database: new URL(url).pathname.slice(1) });

/** Everything in the database's own schema, to show that doctor left it as it was. */
const tables = async (url: string): Promise<unknown> => sql(url, "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1");

// From issue 21.
describe('enrich doctor on the team store', () => {
  it('an empty database: every check ok, and doctor makes no table', async () => {
    const url = await freshDatabase();
    const r = await doctor(url);
    expect(r.code, r.stdout + r.stderr).toBe(0);
    const { at, database } = place(url);
    expect(storeLines(r.stdout)).toStrictEqual([
      ['store', 'ok', expect.stringMatching(new RegExp(`^${shown(url).replace(/[.?]/g, '\\$&')} \\(the team store\\): reachable at ${at}, database ${database} \\(PostgreSQL \\d+`))],
      ['login', 'ok', 'as postgres'],
      ['schema', 'ok', `empty: the first run creates the schema (version ${SCHEMA_VERSION})`],
      ['writable', 'ok', "postgres may create enrich's tables here (the first run does)"],
      ['clock', 'ok', expect.stringMatching(/^this host's clock agrees with the server's \(within \d+ ms; round trip \d+ ms\)$/)],
      ['identity', 'note', 'none yet: the first run makes the store id every machine then shares'],
    ]);
    expect(r.stdout).not.toContain(new URL(url).password);
    expect(await tables(url)).toStrictEqual([]);
  });

  it("a store in use: its schema version, the role's rights and its store id; nothing recorded", async () => {
    const url = await freshDatabase();
    const store = await PgStore.open(url, { tool: 'test' });
    await store.close();
    const before = await sql(url, 'SELECT count(*)::int AS n FROM runs');
    const r = await doctor(url, ['--json']);
    expect(r.code, r.stdout).toBe(0);
    const json = JSON.parse(r.stdout) as { ok: boolean; checks: { check: string; status: string; text: string }[] };
    expect(json.ok).toBe(true);
    const byCheck = new Map(json.checks.map((c) => [c.check, c]));
    expect(byCheck.get('schema')).toStrictEqual({ check: 'schema', status: 'ok', text: `version ${SCHEMA_VERSION}, this enrich's` });
    expect(byCheck.get('writable')).toStrictEqual({ check: 'writable', status: 'ok', text: 'postgres may write every table a run writes (asked of the server: nothing was written)' });
    expect(byCheck.get('identity')?.text).toBe(`store id ${store.storeId}: every Idempotency-Key derives from it, so every machine on this store shows the same`);
    // Another machine (another host name) shows the same id.
    const elsewhere = await runCli(['doctor', '--sandbox'], { env: { ENRICH_STORE: url, ENRICH_HOST: 'cron-1' } });
    expect(report(elsewhere.stdout).get('identity')?.[1]).toContain(`store id ${store.storeId}:`);
    expect(r.stdout).not.toContain(new URL(url).password);
    expect(await sql(url, 'SELECT count(*)::int AS n FROM runs')).toStrictEqual(before);
  });

  it('an older schema is a note and left as it is; a newer one is a fix, exit 2', async () => {
    const url = await freshDatabase();
    await sql(url, MIGRATIONS[0] as string);
    await sql(url, "INSERT INTO meta (key, value) VALUES ('schema_version', '1'), ('store_id', '00112233aabbccdd')");
    const behind = await doctor(url);
    expect(behind.code, behind.stdout).toBe(0);
    expect(report(behind.stdout).get('schema')).toStrictEqual([
      'note',
      `version 1, behind this enrich's (${SCHEMA_VERSION}): the next run upgrades it (forward only: machines on an older enrich then refuse it until upgraded)`,
    ]);
    expect(report(behind.stdout).get('identity')?.[1]).toMatch(/^store id 00112233aabbccdd:/);
    expect(await sql(url, "SELECT value FROM meta WHERE key = 'schema_version'")).toStrictEqual([{ value: '1' }]);
    await sql(url, "UPDATE meta SET value = '99' WHERE key = 'schema_version'");
    const newer = await doctor(url);
    expect(newer.code).toBe(2);
    expect(report(newer.stdout).get('schema')).toStrictEqual(['FIX', `version 99, newer than this enrich's (${SCHEMA_VERSION}): a batch refuses it; upgrade enrich on this machine`]);
    expect(report(newer.stdout).get('writable')?.[0]).toBe('note');
    expect(newer.stdout.trimEnd().split('\n').at(-1)).toBe('enrich doctor: 1 to fix');
  });

  it('a read-only role: writable is a fix naming the grant, and no schema is made or upgraded', async () => {
    const url = await freshDatabase();
    await (await PgStore.open(url, { tool: 'test' })).close();
    const reader = await roles.role(url, READ_ONLY(url));
    const r = await doctor(reader.url);
    expect(r.code, r.stdout).toBe(2);
    expect(report(r.stdout).get('login')).toStrictEqual(['ok', `as ${reader.name}`]);
    expect(report(r.stdout).get('writable')).toStrictEqual([
      'FIX',
      `the role ${reader.name} cannot write the team store ${place(url).database} on ${place(url).at} (no INSERT on services, and 12 more); the tables' owner can grant what a run needs: ` +
        `GRANT SELECT, INSERT, UPDATE ON services, lookups, companies, purchases, runs, imports TO ${reader.name}; GRANT SELECT ON meta, budgets TO ${reader.name}; GRANT USAGE ON SEQUENCE services_id_seq, runs_id_seq TO ${reader.name}`,
    ]);
    expect(r.stdout).not.toContain('role-s3cret-pw');

    const empty = await freshDatabase();
    const stranger = await roles.role(empty, READ_ONLY(empty));
    const first = await doctor(stranger.url);
    expect(first.code).toBe(2);
    expect(report(first.stdout).get('writable')).toStrictEqual([
      'FIX',
      `${stranger.name} may not create tables in this database, and the first run makes them: run it as the database's owner (or its owner can GRANT CREATE ON SCHEMA public TO ${stranger.name})`,
    ]);

    const old = await freshDatabase();
    await sql(old, MIGRATIONS[0] as string);
    await sql(old, "INSERT INTO meta (key, value) VALUES ('schema_version', '1'), ('store_id', '00112233aabbccdd')");
    const writer = await roles.role(old, [...READ_ONLY(old), 'GRANT INSERT, UPDATE ON ALL TABLES IN SCHEMA public TO ROLE', 'GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO ROLE']);
    const behind = await doctor(writer.url);
    expect(behind.code).toBe(2);
    expect(report(behind.stdout).get('schema')).toStrictEqual([
      'FIX',
      `version 1, behind this enrich's (${SCHEMA_VERSION}): the next run must upgrade it, and ${writer.name} may not (it does not own the tables); run the next batch as their owner`,
    ]);
    expect(report(behind.stdout).get('writable')?.[0]).toBe('ok');

    // Who may change the team's budgets: the owner may; a role granted only SELECT on budgets runs, and may not (docs/budgets.md).
    expect(report((await doctor(url)).stdout).get('budgets')?.[1]).toMatch(/may set and clear the team's monthly budgets/);
    const runner = await roles.role(url, [...READ_ONLY(url), 'GRANT INSERT, UPDATE ON services, lookups, companies, purchases, runs, imports TO ROLE', 'GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO ROLE']);
    const restricted = await doctor(runner.url);
    expect(report(restricted.stdout).get('writable')?.[0], restricted.stdout).toBe('ok');
    expect(report(restricted.stdout).get('budgets')).toStrictEqual(['ok', `${runner.name} may not change the team's monthly budgets (only SELECT on budgets): its runs meet them, and their owner sets them`]);
    const refused = await runCli(['budget', 'set', '10', '--store', runner.url]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/^enrich: the role this store is opened as may not change this team store's budgets \(PostgreSQL: permission denied for table budgets\)/);
  });

  it('a silent server is exit 6; a wrong password or missing database exit 2; never a password', async () => {
    const url = await freshDatabase();
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as { port: number }).port;
    await new Promise<void>((resolve) => server.close(() => resolve()));
    const closed = new URL(url);
    closed.port = String(port);
    const nobody = await runCli(['doctor', '--sandbox', '--store', closed.toString()]);
    expect(nobody.code).toBe(6);
    expect(storeLines(nobody.stdout)).toStrictEqual([
      ['store', 'FIX', `${shown(closed.toString())} (the team store): cannot reach 127.0.0.1:${port}: connection refused (is PostgreSQL running there?); check the address, the network or a firewall`],
    ]);

    const wrong = new URL(url);
    wrong.password = 'not-the-pw-9f8e7d';
    const login = await doctor(wrong.toString());
    expect(login.code).toBe(2);
    expect(report(login.stdout).get('login')).toStrictEqual(['FIX', 'refused (password authentication failed for user "postgres"): check the user and password (PGPASSWORD or ~/.pgpass)']);
    expect(login.stdout).not.toContain('not-the-pw-9f8e7d');

    const missing = new URL(url);
    missing.pathname = '/enrich_no_such_db';
    const none = await doctor(missing.toString());
    expect(none.code).toBe(2);
    expect(report(none.stdout).get('login')).toStrictEqual(['FIX', `${place(url).at} has no database enrich_no_such_db: create it (createdb enrich_no_such_db) or fix the address`]);
    for (const r of [nobody, login, none]) expect(r.stdout + r.stderr).not.toContain(new URL(url).password);
  });
});

describe('any PostgreSQL a team has', () => {
  it('a direct connection keeps its session: doctor says so on its pool line', async () => {
    const r = await doctor(await freshDatabase());
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect(report(r.stdout).get('pool')).toStrictEqual(['ok', 'a session is kept from one transaction to the next (a direct connection, or a pooler in session mode)']);
  });

  it('a read-only database: a run refuses it in one line, exit 2, nothing sent; doctor names it', async () => {
    const url = await freshDatabase();
    const { at, database } = place(url);
    await sql(url, `ALTER DATABASE ${database} SET default_transaction_read_only = on`);
    const r = await doctor(url);
    expect(r.code).toBe(2);
    expect(report(r.stdout).get('writable')).toStrictEqual(['FIX', `${database} on ${at} is read-only (a replica, or default_transaction_read_only = on): a run refuses it; give the primary's address`]);
    const dir = tempDir();
    try {
      const run = await runCli([dir.file('in.csv', csvText([['domain'], ['acme.com']])), '--sandbox', '--store', url, '-o', dir.file('out.csv')]);
      expect(run.code).toBe(2);
      expect(run.stderr.trim().split('\n')).toStrictEqual([`enrich: the team store ${database} on 127.0.0.1:${new URL(url).port} is read-only (a replica, or default_transaction_read_only = on); give the primary's address; nothing was sent to the service`]);
    } finally {
      dir.cleanup();
    }
  });
});

describe("the clock check: the server's clock against this host's", () => {
  const state = (skewMs: number, roundTripMs = 4): TeamStoreState => ({
    place: { host: 'db.example.com', port: 5432, database: 'enrich' },
    role: 'enrich',
    server: '18.1',
    schema: SCHEMA_VERSION,
    canMigrate: true,
    missing: [],
    storeId: '00112233aabbccdd',
    clock: { skewMs, roundTripMs },
    readOnly: false,
    keepsSession: true,
    mayChangeBudgets: null,
  });
  const clock = (s: TeamStoreState) => teamStoreLines('postgres://enrich@db.example.com/enrich', { reached: true, ...s }).find((c) => c.label === 'clock');

  it(`is ok within ${SKEW_NOTE_MS} ms, counting the round trip in the host's favour`, () => {
    expect(clock(state(120))).toMatchObject({ status: 'ok', text: "this host's clock agrees with the server's (within 122 ms; round trip 4 ms)" });
    // 2.5 s off, but the answer took 1.2 s: it may be 1.9 s, so no note.
    expect(clock(state(2_500, 1_200))?.status).toBe('ok');
  });

  it('is a note past it, never a failure: leases are judged by the server', () => {
    expect(clock(state(5_200))).toMatchObject({
      status: 'note',
      kind: null,
      text: "this host's clock is 5.2s behind the server's (round trip 4 ms): runs on this store keep time by the server's clock, so no purchase is at risk here; a SQLite store this host keeps (and a ledger copy of it) is off by as much: set up NTP here",
    });
    expect(clock(state(-90_000))?.text).toMatch(/^this host's clock is 1m30s ahead of the server's/);
  });
});
