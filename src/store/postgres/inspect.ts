import type pg from 'pg';
import { type ClockReading, ServerClock } from './server-clock.js';
import { client, describe, type Session, failureClass, keepsSessionSurely, placeOf, type FailureClass, type Place } from './connect.js';
import { NOW_MS, SCHEMA_VERSION } from './schema.js';

/** Looks at a team store without changing it: what `enrich doctor` reports, and what PgStore.open asks before a run (schema version, store id, write rights). */

/** The tables a run writes (meta is written only by a migration, which the tables' owner runs). */
export const WRITTEN_TABLES = ['services', 'lookups', 'companies', 'purchases', 'runs', 'imports'] as const;
const ALL_TABLES = ['meta', ...WRITTEN_TABLES];
/** The tables whose ids come from a sequence (BIGSERIAL), which an insert must be allowed to use. */
const SEQUENCED_TABLES = ['services', 'runs'];

/** meta.schema_version: 0 when the database has no enrich schema yet. */
export async function schemaVersion(db: pg.Client): Promise<number> {
  const exists = await db.query<{ t: string | null }>(`SELECT to_regclass('meta')::text AS t`);
  if (exists.rows[0]?.t == null) return 0;
  const { rows } = await db.query<{ v: string }>(`SELECT value AS v FROM meta WHERE key = 'schema_version'`);
  return Number(rows[0]?.v ?? 0);
}

/** The store's identity with the key epoch a prune bumps (as the SQLite store's), or null if meta has none. */
export async function readStoreId(db: { query: Session['query'] }): Promise<string | null> {
  const { rows } = await db.query<{ key: string; value: string }>(`SELECT key, value FROM meta WHERE key IN ('store_id', 'key_epoch')`);
  return storeIdOf(rows);
}

/** The store id of meta's rows (`store_id`, and `key_epoch` once a prune has bumped it), or null if they hold none. */
export function storeIdOf(rows: readonly { key: string; value: string | null }[]): string | null {
  const id = rows.find((r) => r.key === 'store_id')?.value;
  if (id === undefined || id === null || id === '') return null;
  const epoch = Number(rows.find((r) => r.key === 'key_epoch')?.value ?? 0);
  return epoch > 0 ? `${id}.${epoch}` : id;
}

/**
 * The rights a run lacks on the tables there are (`rel`, `priv`), asked of the server so nothing is written to find out. services
 * needs no UPDATE (its rows are only added). $1 the written tables, $2 the sequenced ones.
 */
const MISSING_RIGHTS = `WITH needed (rel, kind, privs) AS (
       SELECT t, 'table', CASE t WHEN 'services' THEN ARRAY['SELECT', 'INSERT'] ELSE ARRAY['SELECT', 'INSERT', 'UPDATE'] END FROM unnest($1::text[]) AS t
       UNION ALL SELECT 'meta', 'table', ARRAY['SELECT']
       UNION ALL SELECT 'budgets', 'table', ARRAY['SELECT']
       UNION ALL SELECT pg_get_serial_sequence(t, 'id'), 'sequence', ARRAY['USAGE'] FROM unnest($2::text[]) AS t WHERE to_regclass(t) IS NOT NULL
     )
     SELECT rel, p AS priv FROM needed, unnest(privs) AS p
      WHERE to_regclass(rel) IS NOT NULL
        AND NOT CASE kind WHEN 'table' THEN has_table_privilege(rel, p) ELSE has_sequence_privilege(rel, p) END`;

const rightOf = (r: { rel: string; priv: string }): string => `${r.priv} on ${r.rel.replace(/^public\./, '')}`;

/** The rights a run needs on the tables there are that this role lacks ("INSERT on runs"). */
export async function missingRights(db: pg.Client): Promise<string[]> {
  const { rows } = await db.query<{ rel: string; priv: string }>(MISSING_RIGHTS, [WRITTEN_TABLES, SEQUENCED_TABLES]);
  return rows.map(rightOf);
}

/** True where the database takes no writes: a replica, or `default_transaction_read_only` set. */
const READ_ONLY = "pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on'";

/** What opening a store reads of it: the schema's version, the store id, and the rights a run lacks. */
export interface Glance {
  version: number;
  storeId: string | null;
  missing: string[];
  /** A replica, or a database set to read-only. */
  readOnly: boolean;
}

/** All PgStore.open asks of a store, in one round trip: meta's rows and, when `rights`, the rights a run lacks. Null without a meta table (no schema yet). */
export async function glance(db: pg.Client, rights: boolean): Promise<Glance | null> {
  let rows: { key: string; value: string | null; priv: string | null }[];
  try {
    ({ rows } = await db.query<{ key: string; value: string | null; priv: string | null }>(
      `WITH missing AS (${MISSING_RIGHTS})
       SELECT key, value, NULL::text AS priv FROM meta WHERE key IN ('schema_version', 'store_id', 'key_epoch')
       UNION ALL SELECT rel::text, NULL, priv FROM missing WHERE $3
       UNION ALL SELECT 'read_only', (${READ_ONLY})::text, NULL`,
      [WRITTEN_TABLES, SEQUENCED_TABLES, rights],
    ));
  } catch (error) {
    // undefined_table: meta, the one table named, is not there.
    if ((error as { code?: unknown }).code === '42P01') return null;
    throw error;
  }
  const meta = rows.filter((r) => r.priv === null);
  return {
    version: Number(meta.find((r) => r.key === 'schema_version')?.value ?? 0),
    storeId: storeIdOf(meta),
    missing: rows.filter((r) => r.priv !== null).map((r) => rightOf({ rel: r.key, priv: r.priv as string })),
    readOnly: meta.find((r) => r.key === 'read_only')?.value === 'true',
  };
}

/** Whether the database takes no writes: a replica, or `default_transaction_read_only` set. */
export async function readOnly(db: pg.Client): Promise<boolean> {
  const { rows } = await db.query<{ ro: boolean }>(`SELECT ${READ_ONLY} AS ro`);
  return rows[0]?.ro === true;
}

/** Whether this role may create enrich's tables (an empty database) or alter them (an older schema): its owner may. */
export async function mayMigrate(db: pg.Client): Promise<boolean> {
  const { rows } = await db.query<{ ok: boolean }>(
    `SELECT coalesce(has_schema_privilege(current_schema(), 'CREATE'), false)
        AND NOT EXISTS (SELECT 1 FROM pg_class c JOIN unnest($1::text[]) AS t ON c.oid = to_regclass(t) WHERE NOT pg_has_role(c.relowner, 'USAGE')) AS ok`,
    [ALL_TABLES],
  );
  return rows[0]?.ok === true;
}

/** A role's name as GRANT takes it. */
const ident = (name: string): string => (/^[a-z_][a-z0-9_$]*$/.test(name) ? name : `"${name.replace(/"/g, '""')}"`);

/** The grants that let `role` run batches on a store another role made: complete, and harmless to repeat. */
export function grantsFor(role: string): string {
  const r = ident(role);
  const sequences = SEQUENCED_TABLES.map((t) => `${t}_id_seq`).join(', ');
  return `GRANT SELECT, INSERT, UPDATE ON ${WRITTEN_TABLES.join(', ')} TO ${r}; GRANT SELECT ON meta, budgets TO ${r}; GRANT USAGE ON SEQUENCE ${sequences} TO ${r}`;
}

/** One line: this role may not write the team store, and the grant that fixes it. */
export function cannotWrite(place: Place, role: string, missing: string): string {
  return `the role ${role} cannot write the team store ${place.database} on ${place.host}:${place.port} (${missing}); the tables' owner can grant what a run needs: ${grantsFor(role)}`;
}

/** "INSERT on services", or the first of several and how many more. */
export function firstMissing(missing: readonly string[]): string {
  return missing.length === 1 ? `no ${missing[0]}` : `no ${missing[0]}, and ${missing.length - 1} more`;
}

/** The server's clock against this host's: the best of three round trips (ServerClock). */
export async function clockSkew(db: pg.Client, now: () => number): Promise<ClockReading> {
  const clock = new ServerClock(now);
  for (let i = 0; i < 3; i++) {
    const sent = now();
    const { rows } = await db.query<{ now: number }>(`SELECT ${NOW_MS} AS now`);
    clock.observe(Number(rows[0]?.now), sent, now());
  }
  return clock.reading();
}

export interface TeamStoreState {
  place: Place;
  role: string;
  /** The server's version, as it says it (18.1). */
  server: string;
  /** meta.schema_version (0: no enrich schema yet); null when this role may not read meta. */
  schema: number | null;
  /** For an empty or older schema: whether this role may make or upgrade it. */
  canMigrate: boolean;
  /** Rights a run needs that this role lacks, on the tables there are ("INSERT on runs"). */
  missing: string[];
  storeId: string | null;
  clock: ClockReading;
  /** A replica, or a database set to read-only: a run refuses it. */
  readOnly: boolean;
  /** Whether a connection keeps its session between transactions (no pooler in transaction mode); null: could not tell. */
  keepsSession: boolean | null;
  /** Whether this role may set and clear the monthly budgets (docs/budgets.md); null: no budgets table yet. */
  mayChangeBudgets: boolean | null;
}

export type Inspection = { reached: false; place: Place; failure: FailureClass; detail: string } | ({ reached: true } & TeamStoreState);

/** Connects and looks inside a read-only transaction that is rolled back: the store is left as it was (no schema made, no run recorded). */
export async function inspectTeamStore(url: string, now: () => number = () => Date.now()): Promise<Inspection> {
  let c: pg.Client;
  try {
    c = client(url);
  } catch (error) {
    // An address whose TLS settings cannot work (sslmode=verify-ca without its CA): nothing was tried.
    const u = new URL(url);
    return { reached: false, place: { host: u.hostname, port: Number(u.port || 5432), database: u.pathname.slice(1) }, failure: 'tls', detail: (error as Error).message };
  }
  const place = placeOf(c);
  try {
    await c.connect();
  } catch (error) {
    await c.end().catch(() => {});
    return { reached: false, place, failure: failureClass(error), detail: describe(error) };
  }
  try {
    // A standby refuses LISTEN: the pool is looked at only where a run could write.
    const readonly = await readOnly(c);
    const kept = readonly || (await keepsSessionSurely(c, url).catch(() => null));
    await c.query('BEGIN ISOLATION LEVEL READ COMMITTED READ ONLY');
    const head = await c.query<{ role: string; server: string }>(`SELECT current_user AS role, current_setting('server_version') AS server`);
    const missing = await missingRights(c);
    const readable = !missing.includes('SELECT on meta');
    const schema = readable ? await schemaVersion(c) : null;
    const storeId = readable && schema !== null && schema > 0 ? await readStoreId(c) : null;
    const canMigrate = schema !== null && schema < SCHEMA_VERSION ? await mayMigrate(c) : true;
    const clock = await clockSkew(c, now);
    const { role = '', server = '' } = head.rows[0] ?? {};
    const budgets = await c.query<{ may: boolean | null }>(
      `SELECT CASE WHEN to_regclass('budgets') IS NULL THEN NULL ELSE has_table_privilege('budgets', 'INSERT') AND has_table_privilege('budgets', 'UPDATE') AND has_table_privilege('budgets', 'DELETE') END AS may`,
    );
    const mayChangeBudgets = budgets.rows[0]?.may ?? null;
    return { reached: true, place, role, server: server.split(' ')[0] ?? server, schema, canMigrate, missing, storeId, clock, readOnly: readonly, keepsSession: kept, mayChangeBudgets };
  } finally {
    await c.query('ROLLBACK').catch(() => {});
    await c.end().catch(() => {});
  }
}
