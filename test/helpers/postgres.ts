import pg from 'pg';
import { inject } from 'vitest';

/**
 * The suite's PostgreSQL (started by postgres-server.ts, vitest's globalSetup, or named by
 * ENRICH_TEST_POSTGRES_URL): each test file, or test, takes a database of its own. Its collation is
 * a language's that ignores punctuation, as a managed server's en_US.UTF-8 does, so nothing can lean
 * on byte order unasked (ICU; a server without it gives its default, said on stderr once).
 */
let noIcuSaid = false;

export async function freshDatabase(): Promise<string> {
  const admin = new URL(inject('postgresUrl'));
  const name = `enrich_test_${process.pid}_${Buffer.from(globalThis.crypto.getRandomValues(new Uint8Array(4))).toString('hex')}`;
  const c = new pg.Client({ connectionString: admin.toString() });
  await c.connect();
  try {
    await c.query(`CREATE DATABASE ${name} TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US-u-ka-shifted' LOCALE 'C'`).catch(async (error: unknown) => {
      if (!noIcuSaid) process.stderr.write(`test/helpers/postgres.ts: test databases keep the server's default collation (no ICU: ${(error as Error).message})\n`);
      noIcuSaid = true;
      await c.query(`CREATE DATABASE ${name}`);
    });
  } finally {
    await c.end();
  }
  admin.pathname = `/${name}`;
  return admin.toString();
}

/** Runs one statement on `url` on a connection of its own. */
export async function sql<R extends pg.QueryResultRow = Record<string, unknown>>(url: string, text: string, values: unknown[] = []): Promise<R[]> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return (await c.query<R>(text, values)).rows;
  } finally {
    await c.end();
  }
}

/** How many sessions of the database at `url` wait on a lock now (other test files' databases share the server). */
export async function lockWaits(url: string): Promise<number> {
  // By session, not by lock: a wait on another transaction (a row it holds) names no database.
  const rows = await sql<{ n: number }>(url, "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'");
  return rows[0]?.n ?? 0;
}

/** How many advisory locks the sessions of the database at `url` hold (`granted`) or wait for. */
export async function advisoryLocks(url: string, granted: boolean): Promise<number> {
  const rows = await sql<{ n: number }>(
    url,
    "SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND granted = $1 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
    [granted],
  );
  return rows[0]?.n ?? 0;
}
