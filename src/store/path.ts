import { homedir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { UsageError } from '../errors.js';
import { statOrNull } from '../io/paths.js';

/**
 * Where the purchase store lives unless --store or ENRICH_STORE says: one per user, in the XDG
 * state directory (state, not cache: it records money spent and must not be cleared lightly).
 */
export function defaultStorePath(env: NodeJS.ProcessEnv): string {
  const xdg = env['XDG_STATE_HOME'];
  // The XDG spec says a relative path in the variable is invalid and must be ignored.
  const stateHome = xdg !== undefined && xdg.startsWith('/') ? xdg : join(env['HOME'] ?? homedir(), '.local', 'state');
  return join(stateHome, 'enrich', 'store.db');
}

/**
 * The embedded sandbox's own store, beside the default one: its play credits never mix with what
 * real runs bought (a month's spend, a budget, a `ledger copy` to the team's store).
 */
export function sandboxStorePath(env: NodeJS.ProcessEnv): string {
  return join(dirname(defaultStorePath(env)), 'sandbox.db');
}

/** --store, else ENRICH_STORE, else the default; what is named is checked by storeFilePath. */
export function resolveStorePath(flag: string | undefined, env: NodeJS.ProcessEnv): string {
  const fromEnv = env['ENRICH_STORE'];
  if (flag !== undefined && flag !== '') return storeFilePath(flag, '--store');
  if (fromEnv !== undefined && fromEnv !== '') return storeFilePath(fromEnv, 'ENRICH_STORE');
  return defaultStorePath(env);
}

/** A postgres:// (or postgresql://) address: the team store, on PostgreSQL. A path is SQLite. */
export function isTeamStore(address: string): boolean {
  return /^postgres(ql)?:\/\//i.test(address);
}

/**
 * A store's address as it may be shown (messages, summaries, `runs`): a team store's without its
 * password (nor any query parameter but sslmode), a file's as given.
 */
export function displayStore(address: string): string {
  if (!isTeamStore(address)) return address;
  try {
    const url = new URL(address);
    url.password = '';
    for (const name of [...url.searchParams.keys()]) if (name !== 'sslmode') url.searchParams.delete(name);
    return url.toString();
  } catch {
    return 'postgres://(an address that does not parse)';
  }
}

/**
 * The one check of what may name a store (`source` is --store or ENRICH_STORE): a postgres://
 * address (the team store), or a plain file path. SQLite would read `file:...` as a URI (another
 * file, made with the umask's mode, past the checks that keep -o off the store) and `:memory:` as
 * no file at all, and libsql takes some URLs for remote databases. An address is never echoed
 * whole: it may hold a password.
 */
export function storeFilePath(value: string, source: string): string {
  if (isTeamStore(value)) {
    try {
      new URL(value);
    } catch {
      throw new UsageError(`${source} is not a valid postgres:// address (postgres://user@host:5432/database)`);
    }
    return value;
  }
  if (value === ':memory:' || /^file:/i.test(value) || /^[a-z][a-z0-9+.-]*:\/\//i.test(value)) {
    throw new UsageError(`${source} ${value}: give the store as a plain file path (not an SQLite URI, :memory: or another address)`);
  }
  return value;
}

/**
 * Scan caches (a pure speed-up for re-reading the same input) sit beside the store; a team
 * store's, which are this machine's alone, where the default store would be.
 */
export function scanCacheDir(store: string, env: NodeJS.ProcessEnv): string {
  return join(dirname(isTeamStore(store) ? defaultStorePath(env) : store), 'scans');
}

/**
 * A store named by --store or ENRICH_STORE goes in a folder that exists, as -o does: a mistyped
 * folder would otherwise be made, with an empty store in it, and what is held bought again. Only
 * the default's folder (under $XDG_STATE_HOME) is made on first use. The trouble, or null.
 */
export function storeFolderProblem(store: string, env: NodeJS.ProcessEnv): string | null {
  if (isTeamStore(store)) return null;
  if (store === defaultStorePath(env)) return homeProblem(env, '--store or ENRICH_STORE');
  // A --sandbox run does not read ENRICH_STORE (it names the real store).
  if (store === sandboxStorePath(env)) return homeProblem(env, '--store');
  const folder = dirname(resolve(store));
  const found = statOrNull(folder);
  if (found?.isDirectory() === true) return null;
  return `${found === null ? `the folder ${folder} does not exist` : `${folder} is not a folder`}; create it, or fix --store (or ENRICH_STORE)`;
}

/**
 * The default's folder is made under HOME, but never HOME itself: a HOME that is not there (a
 * service account's, a typo in a crontab) would otherwise be created, owned by whoever ran.
 */
function homeProblem(env: NodeJS.ProcessEnv, how: string): string | null {
  const xdg = env['XDG_STATE_HOME'];
  if (xdg !== undefined && xdg.startsWith('/')) return null;
  const home = env['HOME'] ?? homedir();
  if (statOrNull(home)?.isDirectory() === true) return null;
  return `HOME (${home}) does not exist; set HOME to a folder that does, or give the store with ${how}`;
}

export function checkStoreFolder(store: string, env: NodeJS.ProcessEnv): void {
  const problem = storeFolderProblem(store, env);
  if (problem !== null) throw new UsageError(`the store ${store}: ${problem}`);
}
