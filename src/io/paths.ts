import { lstat, readlink, realpath } from 'node:fs/promises';
import { basename, dirname, resolve } from 'node:path';

/**
 * Where writing to `path` lands: its real path, or, for a symlink whose target does not exist yet
 * (results are renamed over the target), the target the link names, followed link by link.
 */
export async function landsAt(path: string): Promise<string> {
  let current = resolve(path);
  for (let hops = 0; hops < 32; hops++) {
    const real = await realpath(current).catch(() => null);
    if (real !== null) return real;
    const link = await lstat(current).catch(() => null);
    if (link?.isSymbolicLink() !== true) break;
    current = resolve(dirname(current), await readlink(current));
  }
  // A file not written yet: its folder may itself be reached through a link.
  const folder = await realpath(dirname(current)).catch(() => dirname(current));
  return resolve(folder, basename(current));
}
