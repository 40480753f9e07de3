import { homedir } from 'node:os';
import { isAbsolute, join } from 'node:path';

/** The store's file name inside its directory. */
export const STORE_FILE = 'store.sqlite';

/**
 * Where the purchase store lives when --store is not given: $ENRICH_STORE, else the XDG state
 * directory (what a program keeps between runs that is not config and not cache), else its
 * documented default ~/.local/state. A relative XDG_STATE_HOME is ignored, as the XDG Base
 * Directory spec requires, so a cron job's working directory never moves the store.
 */
export function defaultStorePath(env: NodeJS.ProcessEnv, home: () => string = homedir): string {
  const explicit = env['ENRICH_STORE'];
  if (explicit !== undefined && explicit !== '') return explicit;
  const xdg = env['XDG_STATE_HOME'];
  const stateHome = xdg !== undefined && isAbsolute(xdg) ? xdg : join(env['HOME'] || home(), '.local', 'state');
  return join(stateHome, 'enrich', STORE_FILE);
}
