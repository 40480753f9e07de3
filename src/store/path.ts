import { homedir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { UsageError } from '../errors.js';
import { statOrNull } from '../io/paths.js';

/** The default store: one per user in the XDG state dir (state, not cache: it records money spent). */
export function defaultStorePath(env: NodeJS.ProcessEnv): string {
  const xdg = env['XDG_STATE_HOME'];
  // The XDG spec says a relative path in the variable is invalid and must be ignored.
  const stateHome = xdg !== undefined && xdg.startsWith('/') ? xdg : join(env['HOME'] ?? homedir(), '.local', 'state');
  return join(stateHome, 'enrich', 'store.db');
}

/** The embedded sandbox's own store, so its play credits never mix with what real runs bought. */
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

/** A store's address as it may be shown: a team store's without its password or any query parameter but sslmode. */
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
 * The one check of what may name a store: a postgres:// address or a plain file path. SQLite would take `file:` as a URI
 * (past the checks that keep -o off the store) and `:memory:` as no file; libsql takes some URLs as remote. Never echo it: it may hold a password.
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

/** Scan caches (a pure speed-up) sit beside the store; a team store's, this machine's alone, where the default store would be. */
export function scanCacheDir(store: string, env: NodeJS.ProcessEnv): string {
  return join(dirname(isTeamStore(store) ? defaultStorePath(env) : store), 'scans');
}

/** A named store's folder must exist, as -o's must: a mistyped one would get an empty store and everything bought again. Returns the trouble, or null. */
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

/** Never create HOME itself: a missing one (a service account's, a crontab typo) would be made, owned by whoever ran. */
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
