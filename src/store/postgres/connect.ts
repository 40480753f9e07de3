import pg from 'pg';
import { EnrichError, UsageError } from '../../errors.js';

/** bigint columns (ms since the epoch, run ids) as numbers: every value the store keeps fits in 2^53. */
const types = {
  getTypeParser: ((oid: number, format?: 'text' | 'binary') => (oid === 20 ? (v: string) => Number(v) : pg.types.getTypeParser(oid, format as 'text'))) as pg.CustomTypesConfig['getTypeParser'],
};

export interface Place {
  host: string;
  port: number;
  database: string;
}

/** How long a connection attempt may take before the store is called unreachable. */
const CONNECT_TIMEOUT_MS = 10_000;

/**
 * A client for `url` (PG* variables and ~/.pgpass fill what it leaves out, as for psql), on the
 * extended protocol; `pipeline` sends each query without waiting for the one before.
 */
export function client(url: string, pipeline = false): pg.Client {
  return new pg.Client({ connectionString: url, types, pipeline, connectionTimeoutMillis: CONNECT_TIMEOUT_MS, application_name: 'enrich' });
}

/** Where a client connects, never with its password: for messages. */
export function placeOf(c: pg.Client): Place {
  return { host: c.host.startsWith('/') ? `socket ${c.host}` : c.host, port: c.port, database: c.database ?? '' };
}

/** Connects, or says in one line why the team store cannot be used. */
export async function connect(c: pg.Client): Promise<pg.Client> {
  try {
    await c.connect();
    return c;
  } catch (error) {
    throw connectFailure(placeOf(c), error);
  }
}

/** Why a connection failed: the login refused, no such database, or the server not reached at all. */
export type FailureClass = 'login' | 'database' | 'unreachable';

export function failureClass(error: unknown): FailureClass {
  const code = (error as { code?: string }).code ?? '';
  if (code === '28P01' || code === '28000') return 'login';
  if (code === '3D000') return 'database';
  return 'unreachable';
}

/** One line naming the host and the cause, never the password. */
export function connectFailure(place: Place, error: unknown): EnrichError {
  const failure = failureClass(error);
  const at = `${place.host}:${place.port}`;
  const then = 'nothing was sent to the service';
  if (failure === 'login') return new UsageError(`the team store at ${at} refused the login (${describe(error)}); check the user and password (PGPASSWORD or ~/.pgpass); ${then}`, { cause: error });
  if (failure === 'database') return new UsageError(`the team store at ${at} has no database ${place.database}; create it (createdb ${place.database}) or fix the address; ${then}`, { cause: error });
  return new EnrichError(`cannot reach the team store at ${at}: ${describe(error)}; ${then}, rerun the same command later`, 'unavailable', { cause: error });
}

/** A cause as a person reads it. */
export function describe(error: unknown): string {
  const code = (error as { code?: string }).code ?? '';
  if (code === 'ECONNREFUSED') return 'connection refused (is PostgreSQL running there?)';
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return 'the host name does not resolve';
  if (code === 'ETIMEDOUT' || /timeout/i.test((error as Error).message ?? '')) return 'no answer in time';
  if (code === 'ECONNRESET') return 'the connection was reset';
  const message = error instanceof Error ? error.message : String(error);
  // The server's messages never carry the password; the first line is enough.
  return message.split('\n')[0] ?? message;
}
