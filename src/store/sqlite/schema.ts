/** The store's schema (documented in docs/store-and-resume.md): times in ms since the epoch; every table but meta and runs is keyed by service. */
export const SCHEMA_VERSION = 5;

/** Every table's columns as SCHEMA creates them: an older store gains the ones it lacks (store.ts checkColumns); one still lacking any was damaged or edited. */
export function expectedColumns(): Map<string, Map<string, string>> {
  const tables = new Map<string, Map<string, string>>();
  for (const [, name, body] of SCHEMA.matchAll(/CREATE TABLE IF NOT EXISTS (\w+) \(([^;]*?)\n\)/g)) {
    const columns = new Map<string, string>();
    for (const line of (body as string).split('\n')) {
      const m = /^\s+([a-z_0-9]+)\s+(\w.*?),?$/.exec(line);
      if (m !== null && m[1] !== 'PRIMARY') columns.set(m[1] as string, m[2] as string);
    }
    tables.set(name as string, columns);
  }
  return tables;
}

export const SCHEMA = `
CREATE TABLE IF NOT EXISTS meta (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS services (
  id   INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE
);
-- Every registrable domain looked up with the free match: a hit names its canonical company.
CREATE TABLE IF NOT EXISTS lookups (
  service    INTEGER NOT NULL REFERENCES services(id),
  domain     TEXT NOT NULL,
  status     TEXT NOT NULL CHECK (status IN ('hit', 'miss')),
  company    TEXT,
  name       TEXT,
  checked_at INTEGER NOT NULL,
  PRIMARY KEY (service, domain)
) WITHOUT ROWID;
-- Every company bought: the latest record, as the service returned it.
CREATE TABLE IF NOT EXISTS companies (
  service         INTEGER NOT NULL REFERENCES services(id),
  domain          TEXT NOT NULL,
  name            TEXT NOT NULL,
  record          TEXT NOT NULL,
  bought_at       INTEGER NOT NULL,
  last_updated    TEXT,
  idempotency_key TEXT,
  credits         INTEGER NOT NULL,
  generation      INTEGER NOT NULL,
  run             INTEGER,
  PRIMARY KEY (service, domain)
) WITHOUT ROWID;
-- Every paid unit of work (a company's first purchase is generation 1, each refresh one more):
-- the intent made durable before the request, the key's state, and the outcome.
CREATE TABLE IF NOT EXISTS purchases (
  service     INTEGER NOT NULL REFERENCES services(id),
  domain      TEXT NOT NULL,
  generation  INTEGER NOT NULL,
  key_version INTEGER NOT NULL,
  intent_key  TEXT,
  uncertain   INTEGER NOT NULL DEFAULT 0,
  unconfirmed INTEGER NOT NULL DEFAULT 0,
  error_code  TEXT,
  lost_at     INTEGER,
  settle_ms   INTEGER,
  resumed     INTEGER NOT NULL DEFAULT 0,
  outcome     TEXT NOT NULL CHECK (outcome IN ('open', 'hit', 'miss', 'failed')),
  credits     INTEGER NOT NULL DEFAULT 0,
  owner_run   INTEGER,
  run         INTEGER,
  opened_at   INTEGER NOT NULL,
  closed_at   INTEGER,
  person      TEXT,
  reserved    INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (service, domain, generation)
) WITHOUT ROWID;
-- Every invocation: when, who (user and host), which input, the options that matter, how it ended.
-- (user: schema 3: a store of an earlier layout gains it, empty for the runs it already held.)
CREATE TABLE IF NOT EXISTS runs (
  id           INTEGER PRIMARY KEY,
  service      INTEGER NOT NULL REFERENCES services(id),
  started_at   INTEGER NOT NULL,
  ended_at     INTEGER,
  pid          INTEGER NOT NULL,
  host         TEXT NOT NULL,
  user         TEXT,
  tool         TEXT NOT NULL,
  input_name   TEXT,
  input_sha256 TEXT,
  rows         INTEGER,
  dry_run      INTEGER NOT NULL,
  options      TEXT,
  status       TEXT NOT NULL,
  heartbeat_at INTEGER,
  policy_now   INTEGER,
  credits      INTEGER NOT NULL DEFAULT 0,
  bought       INTEGER NOT NULL DEFAULT 0,
  reused       INTEGER NOT NULL DEFAULT 0
);
-- Monthly caps (store/budget.ts): the store's (person '') and each person's. (schema 4, with
-- purchases.person, who reserved it, and purchases.reserved, the price it holds while open.)
CREATE TABLE IF NOT EXISTS budgets (
  person  TEXT PRIMARY KEY,
  credits INTEGER NOT NULL,
  set_at  INTEGER NOT NULL,
  set_by  TEXT
);
-- Journals of enrich 0.1 imported, so none is imported twice.
CREATE TABLE IF NOT EXISTS imports (
  path        TEXT PRIMARY KEY,
  bytes       INTEGER NOT NULL,
  imported_at INTEGER NOT NULL,
  companies   INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS purchases_owner ON purchases (owner_run) WHERE owner_run IS NOT NULL;
CREATE INDEX IF NOT EXISTS purchases_run ON purchases (run);
`;

/** Indexes on columns a store of an earlier layout gains only once SCHEMA has run (store.ts checkColumns). */
export const LATE_INDEXES = `
CREATE INDEX IF NOT EXISTS purchases_closed ON purchases (closed_at) WHERE closed_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS purchases_held ON purchases (person) WHERE outcome = 'open' AND (intent_key IS NOT NULL OR uncertain = 1 OR unconfirmed > 0);
`;
