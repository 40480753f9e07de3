import { readFileSync, realpathSync, renameSync, rmSync, statfsSync, statSync, writeFileSync, type BigIntStats } from 'node:fs';
import { basename, join } from 'node:path';
import { InputError } from '../errors.js';
import { hashFile, type InputSource } from './input.js';
import { makeDirs } from './paths.js';

/**
 * The input's sha256, without reading it again when it has not changed since it was last hashed.
 *
 * A rerun of an unchanged input (resume after a crash, the cron job's second try) would otherwise
 * spend much of its time hashing: loading node:crypto is a good share of a small rerun, and a
 * 1M-row file takes a sizeable part of a second to hash. So, as git does for its index, the hash is
 * remembered with the file's identity (device, inode, size, modification and change times, to the
 * nanosecond) and reused while all of them are unchanged. Writing a file always moves its change
 * time, which no program can set back, and replacing it (an editor's save, a new export) gives a
 * new inode.
 *
 * The one gap is git's "racily clean" file: written again within the same clock tick as the
 * times we saw. So a hash is remembered only for a file whose times are already two seconds
 * older than the moment hashing began; a file that fresh is simply hashed again next time.
 *
 * Only on a local file system: an NFS client answers stat() from attributes it cached up to a
 * minute ago (a file rewritten on another host would look unchanged), and FUSE or SMB mounts may
 * not keep change times or inodes at all. Elsewhere the input is hashed every time, as before.
 *
 * It is only a cache, beside the scan cache: unreadable, damaged or unwritable means hashing.
 */
const RACY_MS = 2_000;

/** Linux's local file systems (statfs f_type): ext2-4, XFS, Btrfs, tmpfs, overlayfs, ZFS, F2FS, ramfs, bcachefs. */
const LOCAL_FILE_SYSTEMS = new Set([0xef53, 0x58465342, 0x9123683e, 0x01021994, 0x794c7630, 0x2fc12fc1, 0xf2f52010, 0x858458f6, 0xca451a4e]);

function onLocalFileSystem(path: string): boolean {
  if (process.platform !== 'linux') return false;
  try {
    return LOCAL_FILE_SYSTEMS.has(Number(statfsSync(path).type));
  } catch {
    return false;
  }
}

interface Memo {
  path: string;
  identity: string;
  sha256: string;
}

/** What changes whenever the file's bytes may have. */
function identityOf(info: BigIntStats): string {
  return [info.dev, info.ino, info.size, info.mtimeNs, info.ctimeNs].join(':');
}

/** FNV-1a, 32 bits: a short, stable file name for a path (the memo holds the path itself). */
function nameFor(path: string): string {
  let h = 0x811c9dc5;
  for (let i = 0; i < path.length; i++) h = Math.imul(h ^ path.charCodeAt(i), 0x01000193) >>> 0;
  return `${basename(path).replace(/[^A-Za-z0-9._-]/g, '_').slice(0, 40)}-${h.toString(16).padStart(8, '0')}.input`;
}

export async function inputSha256(input: InputSource, memoDir: string, nowMs: () => number = Date.now): Promise<string> {
  // A spooled input (stdin, a pipe) is a new private file every run: nothing to remember.
  if (input.fromStdin) return hashFile(input.path);
  let path: string;
  let before: BigIntStats;
  try {
    path = realpathSync(input.path);
    before = statSync(path, { bigint: true });
  } catch {
    return hashFile(input.path);
  }
  if (!onLocalFileSystem(path)) return hashFile(path);
  const identity = identityOf(before);
  const memoPath = join(memoDir, nameFor(path));
  const memo = readMemo(memoPath);
  if (memo !== null && memo.path === path && memo.identity === identity) return memo.sha256;

  const startedAt = nowMs();
  const sha256 = await hashFile(path);
  const newest = Number((before.mtimeNs > before.ctimeNs ? before.mtimeNs : before.ctimeNs) / 1_000_000n);
  if (newest <= startedAt - RACY_MS) writeMemo(memoDir, memoPath, { path, identity, sha256 });
  return sha256;
}

function readMemo(memoPath: string): Memo | null {
  try {
    const memo = JSON.parse(readFileSync(memoPath, 'utf8')) as Partial<Memo>;
    if (typeof memo.path !== 'string' || typeof memo.identity !== 'string' || typeof memo.sha256 !== 'string' || !/^[0-9a-f]{64}$/.test(memo.sha256)) return null;
    return memo as Memo;
  } catch {
    return null;
  }
}

function writeMemo(memoDir: string, memoPath: string, memo: Memo): void {
  const temp = `${memoPath}.${process.pid}.tmp`;
  try {
    makeDirs(memoDir, 0o700);
    writeFileSync(temp, `${JSON.stringify(memo)}\n`, { mode: 0o600 });
    renameSync(temp, memoPath);
  } catch {
    // Only a cache: the next run hashes again.
    try {
      rmSync(temp, { force: true });
    } catch {
      // the folder itself is unusable: nothing was written
    }
  }
}

/** Refuses to pair an input's rows with companies found for other rows. Both throw an InputError (exit 2). */
export interface InputWatch {
  /** Whether stat still shows the file the run first saw. Synchronous: safe between a write and its sink's end. */
  check(): void;
  /** check(), and where stat cannot vouch for the file, its sha256 compared with the one the run used. */
  verify(sha256: string): Promise<void>;
}

const statNow = (path: string): BigIntStats | null => statSync(path, { bigint: true, throwIfNoEntry: false }) ?? null;

/**
 * The batch reads its input twice, the second time (writing results in input order) by the byte
 * ranges the first found: a file rewritten in between would get the old rows' companies. Its
 * identity is taken before the first read and compared at each step, as the sha256 memo trusts
 * it (git's index does the same): cheap enough for a 1M-row input. Where stat cannot vouch for
 * the file (a mount that caches attributes, or a file written within the clock tick we saw it
 * in), verify() hashes it again. A spool is the run's own private file: nothing to watch.
 */
export function watchInput(input: InputSource, nowMs: () => number = Date.now): InputWatch {
  if (input.fromStdin) return { check: () => {}, verify: async () => {} };
  const before = statNow(input.path);
  const newest = before === null ? 0 : Number((before.mtimeNs > before.ctimeNs ? before.mtimeNs : before.ctimeNs) / 1_000_000n);
  const racy = before === null || !onLocalFileSystem(input.path) || newest > nowMs() - RACY_MS;
  const changed = (): InputError =>
    new InputError(
      `${input.displayName} changed during the run (rewritten or replaced); its results were stopped, as they would pair rows with the wrong companies. Everything bought is kept in the store: run the same command again, and nothing is bought twice`,
    );
  const check = (): void => {
    const now = statNow(input.path);
    if (before === null || now === null || identityOf(now) !== identityOf(before)) throw changed();
  };
  return {
    check,
    async verify(sha256) {
      check();
      if (racy && (await hashFile(input.path)) !== sha256) throw changed();
    },
  };
}
