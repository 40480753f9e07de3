import { errorMessage } from '../errors.js';
import { tlsAdvice } from '../store/postgres/connect.js';
import { cannotWrite, firstMissing, type Inspection, type TeamStoreState } from '../store/postgres/inspect.js';
import { SCHEMA_VERSION } from '../store/postgres/schema.js';
import { displayStore } from '../store/path.js';
import { elapsed } from '../ui/format.js';
import { fail, note, ok, type Check } from './doctor-checks.js';

/** Past this, the host's clock is worth a note: a person comparing times in the ledger would be misled. */
export const SKEW_NOTE_MS = 2_000;

/** The team store's `enrich doctor` lines (reachable, login, schema, writable, clock, identity), each stopping where the last cannot go on; nothing is written. */
export async function teamStoreChecks(address: string): Promise<Check[]> {
  const { inspectTeamStore } = await import('../store/postgres/inspect.js');
  try {
    return teamStoreLines(address, await inspectTeamStore(address));
  } catch (error) {
    return [fail('store', `${displayStore(address)}: answered, but could not be inspected (${errorMessage(error).split('\n')[0]})`, 'failure')];
  }
}

/** What was found, as report lines: pure, so every state is tested without a server in it. */
export function teamStoreLines(address: string, found: Inspection): Check[] {
  const { host, port, database } = found.place;
  const at = `${host}:${port}`;
  const where = `${displayStore(address)} (the team store)`;
  if (!found.reached && found.failure === 'tls') return [fail('store', `${where}: ${/^sslmode=/.test(found.detail) ? found.detail : tlsAdvice(at, new Error(found.detail))}`, 'usage')];
  if (!found.reached && found.failure === 'unreachable') {
    return [fail('store', `${where}: cannot reach ${at}: ${found.detail}; check the address, the network or a firewall`, 'unavailable')];
  }
  if (!found.reached) {
    const reached = ok('store', `${where}: reachable at ${at}, database ${database}`);
    if (found.failure === 'database') return [reached, fail('login', `${at} has no database ${database}: create it (createdb ${database}) or fix the address`, 'usage')];
    return [reached, fail('login', `refused (${found.detail}): check the user and password (PGPASSWORD or ~/.pgpass)`, 'usage')];
  }
  const reached = ok('store', `${where}: reachable at ${at}, database ${database} (PostgreSQL ${found.server})`);
  if (found.readOnly) {
    return [reached, ok('login', `as ${found.role}`), fail('writable', `${database} on ${at} is read-only (a replica, or default_transaction_read_only = on): a run refuses it; give the primary's address`, 'usage')];
  }
  return [reached, ok('login', `as ${found.role}`), poolCheck(found), ...schemaLines(found), clockCheck(found), identityCheck(found), ...budgetCheck(found)];
}

/** How connections reach the server: a session each, or a pooler that hands sessions round between transactions. */
function poolCheck(s: TeamStoreState): Check {
  if (s.keepsSession === null) return note('pool', 'not checked: a second connection was refused (a role limited to one, or a full server); a run works either way');
  if (s.keepsSession) return ok('pool', 'a session is kept from one transaction to the next (a direct connection, or a pooler in session mode)');
  return ok('pool', 'a pooler in transaction mode (a session is not kept between transactions): runs send no named statements and poll for each other rather than LISTEN');
}

/** The schema's version against this enrich's, and whether this role may do what a run will. */
function schemaLines(s: TeamStoreState): Check[] {
  const writable =
    s.missing.length === 0
      ? ok('writable', `${s.role} may write every table a run writes (asked of the server: nothing was written)`)
      : fail('writable', cannotWrite(s.place, s.role, firstMissing(s.missing)), 'usage');
  // Only a role that may not read meta leaves the version unknown, and its writable line says so.
  if (s.schema === null) return [note('schema', `not read: ${s.role} may not read the meta table`), writable];
  if (s.schema > SCHEMA_VERSION) {
    return [
      fail('schema', `version ${s.schema}, newer than this enrich's (${SCHEMA_VERSION}): a batch refuses it; upgrade enrich on this machine`, 'usage'),
      note('writable', 'not checked: the schema is newer than this enrich knows'),
    ];
  }
  if (s.schema === 0) {
    return [
      ok('schema', `empty: the first run creates the schema (version ${SCHEMA_VERSION})`),
      s.canMigrate ? ok('writable', `${s.role} may create enrich's tables here (the first run does)`) : fail('writable', `${s.role} may not create tables in this database, and the first run makes them: run it as the database's owner (or its owner can GRANT CREATE ON SCHEMA public TO ${s.role})`, 'usage'),
    ];
  }
  const schema =
    s.schema === SCHEMA_VERSION
      ? ok('schema', `version ${s.schema}, this enrich's`)
      : s.canMigrate
        ? note('schema', `version ${s.schema}, behind this enrich's (${SCHEMA_VERSION}): the next run upgrades it (forward only: machines on an older enrich then refuse it until upgraded)`)
        : fail('schema', `version ${s.schema}, behind this enrich's (${SCHEMA_VERSION}): the next run must upgrade it, and ${s.role} may not (it does not own the tables); run the next batch as their owner`, 'usage');
  return [schema, writable];
}

/** A team-store run keeps every time by the server's clock, so this host's skew risks no purchase there; what it records in a store of its own does carry it. */
function clockCheck(s: TeamStoreState): Check {
  const { skewMs, roundTripMs } = s.clock;
  const trip = `round trip ${Math.max(1, Math.round(roundTripMs))} ms`;
  // The server's reading falls somewhere within the round trip: only what is beyond it is sure.
  const sure = Math.abs(skewMs) - roundTripMs / 2;
  if (sure <= SKEW_NOTE_MS) return ok('clock', `this host's clock agrees with the server's (within ${Math.max(1, Math.round(Math.abs(skewMs) + roundTripMs / 2))} ms; ${trip})`);
  const way = skewMs > 0 ? 'behind' : 'ahead of';
  return note(
    'clock',
    `this host's clock is ${elapsed(Math.abs(skewMs))} ${way} the server's (${trip}): runs on this store keep time by the server's clock, so no purchase is at risk here; a SQLite store this host keeps (and a ledger copy of it) is off by as much: set up NTP here`,
  );
}

/** Whether this role may change the team's monthly budgets: a note either way (a team restricts it with grants). */
function budgetCheck(s: TeamStoreState): Check[] {
  if (s.mayChangeBudgets === null) return [];
  return [
    s.mayChangeBudgets
      ? ok('budgets', `${s.role} may set and clear the team's monthly budgets (enrich budget set); to keep that to the owner, grant others only SELECT on budgets (docs/budgets.md)`)
      : ok('budgets', `${s.role} may not change the team's monthly budgets (only SELECT on budgets): its runs meet them, and their owner sets them`),
  ];
}

function identityCheck(s: TeamStoreState): Check {
  if (s.schema === null) return note('identity', `not read: ${s.role} may not read the meta table`);
  if (s.schema === 0) return note('identity', 'none yet: the first run makes the store id every machine then shares');
  if (s.storeId === null) return fail('identity', 'the meta table has no store id: this is not an enrich store, or was edited by hand', 'usage');
  return ok('identity', `store id ${s.storeId}: every Idempotency-Key derives from it, so every machine on this store shows the same`);
}
