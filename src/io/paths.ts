import { lstatSync, mkdirSync, readdirSync, readlinkSync, realpathSync, statSync, type Stats } from 'node:fs';
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
 * What tells two paths apart as files: an existing regular file's device and inode (a hard link
 * is one more name of the same file), else where writing to the path lands (landsAt). Devices and
 * pipes keep the name: one terminal or pipe may well take both results and a summary.
 */
export function fileIdentity(path: string): string {
  const found = statOrNull(path);
  return found?.isFile() === true ? `inode ${found.dev}:${found.ino}` : landsAt(path);
}

/**
 * 1 or 2 when `path` names this process's stdout or stderr (/dev/stdout, /dev/fd/1,
 * /proc/self/fd/2, ...); else null. Output to them goes through the descriptor, never a new open
 * of the path: that would truncate a file the shell opened for appending (`-o /dev/stdout >> log`),
 * a temp file renamed over it would replace the file, and Linux refuses to open a socket (a
 * parent's stdio, systemd's journal) by path. (Other descriptors are opened by path, as a pipe
 * from bash's `>(gzip ...)` can be: past 2, this process cannot tell one given to it from one of
 * Node's own.)
 */
export function inheritedDescriptor(path: string): 1 | 2 | null {
  if (process.platform === 'win32') return null;
  const m = /^\/(?:dev\/(?:(stdout)|(stderr)|fd\/([12]))|proc\/(self|\d+)\/fd\/([12]))$/.exec(resolve(path));
  if (m === null) return null;
  if (m[4] !== undefined && m[4] !== 'self' && Number(m[4]) !== process.pid) return null;
  return m[1] !== undefined || (m[3] ?? m[5]) === '1' ? 1 : 2;
}

/** N when `path` is /dev/fd/N or /proc/self/fd/N (a descriptor of this process named by path); else null. */
export function descriptorNumber(path: string): number | null {
  const m = /^\/(?:dev|proc\/self)\/fd\/(\d+)$/.exec(resolve(path));
  return m === null ? null : Number(m[1]);
}

/**
 * Whether descriptor `fd` is one Node opened for itself: an event or epoll descriptor, or a pipe
 * with both of its ends open here. Writing into one would corrupt the event loop, or fail once
 * the work is done; a pipe given to us (bash's `>(gzip ...)`) has its other end elsewhere. Linux
 * only; false elsewhere.
 */
export function ownDescriptor(fd: number): boolean {
  if (process.platform !== 'linux') return false;
  const target = attempt(() => readlinkSync(`/proc/self/fd/${fd}`));
  if (target === null) return false;
  if (target.startsWith('anon_inode:')) return true;
  if (!target.startsWith('pipe:')) return false;
  const fds = attempt(() => readdirSync('/proc/self/fd')) ?? [];
  return fds.some((other) => other !== String(fd) && attempt(() => readlinkSync(`/proc/self/fd/${other}`)) === target);
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

/**
 * `mkdir -p`, one level at a time from the deepest folder there is. Node's own recursive mkdir
 * never returns where mkdir answers ENOENT for a folder whose parent exists (under /proc, for
 * one): it makes the parent again, forever, at full CPU and deaf to Ctrl-C. Throws what mkdir
 * answered for the first folder it could not make.
 */
export function makeDirs(dir: string, mode: number): void {
  const missing: string[] = [];
  for (let at = resolve(dir); statOrNull(at) === null; at = dirname(at)) {
    missing.push(at);
    if (dirname(at) === at) break;
  }
  for (const folder of missing.reverse()) {
    try {
      mkdirSync(folder, { mode });
    } catch (error) {
      // Made by another process meanwhile: fine. Anything else by that name (a dangling link, a
      // file) is not a folder to make the rest in.
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST' || statOrNull(folder)?.isDirectory() !== true) throw error;
    }
  }
}

function attempt<T>(f: () => T): T | null {
  try {
    return f();
  } catch {
    return null;
  }
}

/**
 * Why a path must not be followed: a symbolic link in a sticky folder anyone may write to (/tmp),
 * owned by neither this user nor the folder's owner, which anyone could have planted to make a
 * write land on a file of this user's (Linux's fs.protected_symlinks rule, for the same reason);
 * null when it may be.
 */
export function plantedLink(path: string): string | null {
  const uid = process.getuid?.();
  if (uid === undefined) return null;
  const link = lstatOrNull(path);
  if (link?.isSymbolicLink() !== true || link.uid === uid) return null;
  const folder = dirname(resolve(path));
  const dir = statOrNull(folder);
  if (dir === null || (dir.mode & 0o1002) !== 0o1002 || link.uid === dir.uid) return null;
  return `${path} is a link another user made in ${folder}, a folder anyone may write to: enrich does not follow it (it would replace whatever the link points at); give a path of your own`;
}
