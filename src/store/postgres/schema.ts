/**
 * The team store's schema: the SQLite store's tables and column names, times in ms. Forward-only numbered migrations run once, in
 * order, under the maintenance lock (store.ts); meta.schema_version lets a store written by a newer enrich be refused.
 */

/** The server's clock in ms since the epoch: leases and heartbeats are judged by it, never a host's. */
export const NOW_MS = `(extract(epoch from clock_timestamp()) * 1000)::bigint`;

export const MIGRATIONS: readonly string[] = [
  // 1: the tables of SQLite schema 2.
  `
CREATE TABLE IF NOT EXISTS meta (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS services (
  id   BIGSERIAL PRIMARY KEY,
  name TEXT NOT NULL UNIQUE
);
CREATE TABLE IF NOT EXISTS lookups (
  service    BIGINT NOT NULL REFERENCES services(id),
  domain     TEXT NOT NULL,
  status     TEXT NOT NULL CHECK (status IN ('hit', 'miss')),
  company    TEXT,
  name       TEXT,
  checked_at BIGINT NOT NULL,
  PRIMARY KEY (service, domain)
);
CREATE TABLE IF NOT EXISTS companies (
  service         BIGINT NOT NULL REFERENCES services(id),
  domain          TEXT NOT NULL,
  name            TEXT NOT NULL,
  record          TEXT NOT NULL,
  bought_at       BIGINT NOT NULL,
  last_updated    TEXT,
  idempotency_key TEXT,
  credits         INTEGER NOT NULL,
  generation      INTEGER NOT NULL,
  run             BIGINT,
  PRIMARY KEY (service, domain)
);
CREATE TABLE IF NOT EXISTS purchases (
  service     BIGINT NOT NULL REFERENCES services(id),
  domain      TEXT NOT NULL,
  generation  INTEGER NOT NULL,
  key_version INTEGER NOT NULL,
  intent_key  TEXT,
  uncertain   INTEGER NOT NULL DEFAULT 0,
  unconfirmed INTEGER NOT NULL DEFAULT 0,
  error_code  TEXT,
  lost_at     BIGINT,
  outcome     TEXT NOT NULL CHECK (outcome IN ('open', 'hit', 'miss', 'failed')),
  credits     INTEGER NOT NULL DEFAULT 0,
  owner_run   BIGINT,
  run         BIGINT,
  opened_at   BIGINT NOT NULL,
  closed_at   BIGINT,
  PRIMARY KEY (service, domain, generation)
);
CREATE TABLE IF NOT EXISTS runs (
  id           BIGSERIAL PRIMARY KEY,
  service      BIGINT NOT NULL REFERENCES services(id),
  started_at   BIGINT NOT NULL,
  ended_at     BIGINT,
  pid          INTEGER NOT NULL,
  host         TEXT NOT NULL,
  tool         TEXT NOT NULL,
  input_name   TEXT,
  input_sha256 TEXT,
  rows         INTEGER,
  dry_run      INTEGER NOT NULL,
  options      TEXT,
  status       TEXT NOT NULL,
  heartbeat_at BIGINT,
  policy_now   BIGINT,
  credits      INTEGER NOT NULL DEFAULT 0,
  bought       INTEGER NOT NULL DEFAULT 0,
  reused       INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS imports (
  path        TEXT PRIMARY KEY,
  bytes       BIGINT NOT NULL,
  imported_at BIGINT NOT NULL,
  companies   INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS purchases_owner ON purchases (owner_run) WHERE owner_run IS NOT NULL;
CREATE INDEX IF NOT EXISTS purchases_run ON purchases (run);
`,
  // 2: who ran it, for the team's "who spent what" (the host is already in runs).
  `ALTER TABLE runs ADD COLUMN IF NOT EXISTS "user" TEXT;`,
  // 3: which boot of the host ran it: its pid is judged only by that boot (host.ts bootId).
  `ALTER TABLE runs ADD COLUMN IF NOT EXISTS boot TEXT;`,
  // 4: monthly budgets (store/budget.ts): the caps, who reserved each purchase, and the price it holds while open.
  `
CREATE TABLE IF NOT EXISTS budgets (
  person  TEXT PRIMARY KEY,
  credits INTEGER NOT NULL,
  set_at  BIGINT NOT NULL,
  set_by  TEXT
);
ALTER TABLE purchases ADD COLUMN IF NOT EXISTS person TEXT;
ALTER TABLE purchases ADD COLUMN IF NOT EXISTS reserved INTEGER NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS purchases_closed ON purchases (closed_at) WHERE closed_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS purchases_held ON purchases (person) WHERE outcome = 'open' AND (intent_key IS NOT NULL OR uncertain = 1 OR unconfirmed > 0);
`,
  // 5: purchases.settle_ms (Purchase.settleMs) and purchases.resumed (KeptPurchase.resumed).
  `ALTER TABLE purchases ADD COLUMN IF NOT EXISTS settle_ms BIGINT;
ALTER TABLE purchases ADD COLUMN IF NOT EXISTS resumed INTEGER NOT NULL DEFAULT 0;`,
];

export const SCHEMA_VERSION = MIGRATIONS.length;

/** Held by whoever migrates, prunes or copies into the store: one maintainer at a time. */
export const MAINTENANCE_LOCK = 0x656e72696368; // "enrich"
