import { statfsSync, statSync, type BigIntStats } from 'node:fs';
import { InputError } from '../errors.js';
import { hashFile, type InputSource } from './input.js';

/** Within this long of a run's first look a rewrite may not move the file's times (git's "racily clean" file): such a file is hashed again. */
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

/** What changes whenever the file's bytes may have. */
function identityOf(info: BigIntStats): string {
  return [info.dev, info.ino, info.size, info.mtimeNs, info.ctimeNs].join(':');
}

/** The input's sha256, hashed every run: skipping it for an unchanged input saved nothing measurable. */
export async function inputSha256(input: InputSource): Promise<string> {
  return hashFile(input.path);
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
 * The second read goes by the first's byte ranges, so a file rewritten in between would get the old rows' companies: its stat identity is
 * compared at each step (as git's index trusts it), and where stat cannot vouch (an attribute-caching mount, a racy mtime) verify() rehashes.
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
