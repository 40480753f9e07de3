import { lstatSync, mkdirSync, readdirSync, readlinkSync, realpathSync, statSync, type Stats } from 'node:fs';
import { basename, dirname, resolve } from 'node:path';

/** Where writing to `path` lands: its real path or, for a symlink to a file not yet there (results are renamed over it), the target, link by link. */
export function landsAt(path: string): string {
  let current = resolve(path);
  for (let hops = 0; hops < 32; hops++) {
    const real = attempt(() => realpathSync(current));
    if (real !== null) return real;
    const link = lstatOrNull(current);
    const target = link?.isSymbolicLink() === true ? attempt(() => readlinkSync(current)) : null;
    if (target === null) break;
    // A relative target is relative to the link's real folder, as the kernel reads it, not to the path as typed.
    current = resolve(attempt(() => realpathSync(dirname(current))) ?? dirname(current), target);
  }
  // A file not written yet: its folder may itself be reached through a link.
  const folder = attempt(() => realpathSync(dirname(current))) ?? dirname(current);
  return resolve(folder, basename(current));
}

/** What tells two paths apart as files: a regular file's device and inode (hard links are one file), else landsAt; devices and pipes keep the name. */
export function fileIdentity(path: string): string {
  const found = statOrNull(path);
  return found?.isFile() === true ? `inode ${found.dev}:${found.ino}` : landsAt(path);
}

/**
 * 1 or 2 when `path` names this process's stdout or stderr (/dev/stdout, /proc/self/fd/2, ...), else null. Such output goes through the
 * descriptor: opening the path would truncate an appended file, a rename would replace it, and Linux cannot open a socket by path.
 * Past 2 this process cannot tell a descriptor given to it from one of Node's own.
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

/** Whether `fd` is one Node opened for itself (an event/epoll descriptor, or a pipe with both ends here): writing into one would corrupt the loop. Linux only. */
export function ownDescriptor(fd: number): boolean {
  if (process.platform !== 'linux') return false;
  const target = attempt(() => readlinkSync(`/proc/self/fd/${fd}`));
  if (target === null) return false;
  if (target.startsWith('anon_inode:')) return true;
  if (!target.startsWith('pipe:')) return false;
  const fds = attempt(() => readdirSync('/proc/self/fd')) ?? [];
  return fds.some((other) => other !== String(fd) && attempt(() => readlinkSync(`/proc/self/fd/${other}`)) === target);
}

/** A path's metadata, or null for any failure (absent, a loop, no permission...), so callers say what they need in their own words. */
export function statOrNull(path: string): Stats | null {
  return attempt(() => statSync(path));
}

export function lstatOrNull(path: string): Stats | null {
  return attempt(() => lstatSync(path));
}

/**
 * `mkdir -p`, one level at a time. Node's recursive mkdir spins forever (full CPU, deaf to Ctrl-C) where mkdir answers ENOENT for a folder
 * whose parent exists (under /proc). Throws what mkdir answered for the first folder it could not make.
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
      // Made by another process meanwhile: fine; anything else by that name is not a folder to make the rest in.
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
 * Why a path must not be followed: a symlink in a world-writable sticky folder (/tmp) owned by neither this user nor the folder's owner,
 * which anyone could have planted (Linux's fs.protected_symlinks rule); null when it may be.
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
