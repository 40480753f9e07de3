import { lstatSync, readlinkSync, realpathSync } from 'node:fs';
import { basename, dirname, resolve } from 'node:path';

/**
 * Where writing to `path` lands: its real path, or, for a symlink whose target does not exist yet
 * (results are renamed over the target), the target the link names, followed link by link.
 */
export function landsAt(path: string): string {
  let current = resolve(path);
  for (let hops = 0; hops < 32; hops++) {
    const real = attempt(() => realpathSync(current));
    if (real !== null) return real;
    const link = lstatSync(current, { throwIfNoEntry: false });
    if (link?.isSymbolicLink() !== true) break;
    current = resolve(dirname(current), readlinkSync(current));
  }
  // A file not written yet: its folder may itself be reached through a link.
  const folder = attempt(() => realpathSync(dirname(current))) ?? dirname(current);
  return resolve(folder, basename(current));
}

function attempt<T>(f: () => T): T | null {
  try {
    return f();
  } catch {
    return null;
  }
}
