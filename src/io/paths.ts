import { lstatSync, readlinkSync, realpathSync, statSync, type Stats } from 'node:fs';
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
    const link = lstatOrNull(current);
    const target = link?.isSymbolicLink() === true ? attempt(() => readlinkSync(current)) : null;
    if (target === null) break;
    // A relative target is relative to the link's real folder, as the kernel reads it, not to
    // the path as typed (which may itself pass through links).
    current = resolve(attempt(() => realpathSync(dirname(current))) ?? dirname(current), target);
  }
  // A file not written yet: its folder may itself be reached through a link.
  const folder = attempt(() => realpathSync(dirname(current))) ?? dirname(current);
  return resolve(folder, basename(current));
}

/**
 * A path's metadata, or null if it cannot be had for any reason (absent, a parent that is a file,
 * a symlink loop, no permission, a name too long): callers then say what they need in their own
 * words, as they did for a missing file, instead of failing with the system's error.
 */
export function statOrNull(path: string): Stats | null {
  return attempt(() => statSync(path));
}

export function lstatOrNull(path: string): Stats | null {
  return attempt(() => lstatSync(path));
}

function attempt<T>(f: () => T): T | null {
  try {
    return f();
  } catch {
    return null;
  }
}
