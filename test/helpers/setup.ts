import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach } from 'vitest';

/**
 * Every test gets a state directory of its own, so its purchase store starts empty and no test
 * sees (or leaves) another's purchases, nor the user's own store. A test that needs one store
 * across several runs simply runs them inside one test; the CLI helpers pass this on.
 */
let dir: string | undefined;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'enrich-state-'));
  process.env['XDG_STATE_HOME'] = dir;
  process.env['XDG_CACHE_HOME'] = join(dir, 'cache');
});
afterEach(() => {
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  dir = undefined;
});

/**
 * The environment every run of the CLI in tests starts from. Runs in this process (main() from
 * src/) commit the store's writes on the built writer thread, as the installed CLI does.
 */
export function baseEnv(): Record<string, string | undefined> {
  return { PATH: process.env['PATH'], HOME: process.env['HOME'], XDG_STATE_HOME: process.env['XDG_STATE_HOME'], XDG_CACHE_HOME: process.env['XDG_CACHE_HOME'], ENRICH_STORE_WRITER: 'thread' };
}
