import { homedir } from 'node:os';
import { dirname, join } from 'node:path';

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

/** --store, else ENRICH_STORE, else the default. */
export function resolveStorePath(flag: string | undefined, env: NodeJS.ProcessEnv): string {
  const fromEnv = env['ENRICH_STORE'];
  if (flag !== undefined && flag !== '') return flag;
  if (fromEnv !== undefined && fromEnv !== '') return fromEnv;
  return defaultStorePath(env);
}

/** Scan caches (a pure speed-up for re-reading the same input) sit beside the store. */
export function scanCacheDir(storePath: string): string {
  return join(dirname(storePath), 'scans');
}
