import { statfsSync } from 'node:fs';
import { InputError } from '../errors.js';

/** A piped input has no size up front (`enrich - < /dev/zero` never ends), so the spool is checked as it grows against what no CSV does (docs/input-and-display.md "Streams"). */
export const SPOOL_LIMITS = {
  /** Far past any real row (a spreadsheet cell holds at most 32,767 characters); garbage has no line breaks. */
  maxLineBytes: 8 * 1024 * 1024,
  /** statfs costs a system call: once per this much spooled is plenty. */
  freeCheckBytes: 8 * 1024 * 1024,
  /** The most a piped input may be: several times a million-row export, far short of a disk filled by an endless stream. ENRICH_STDIN_LIMIT_MIB raises it; files have no limit. */
  maxBytes: 4 * 1024 ** 3,
  /** The spool stops while this much of its disk is still free: 5% of it, at most 1 GiB. */
  freeFloor: (diskBytes: number): number => Math.min(1024 ** 3, diskBytes * 0.05),
};

export interface DiskSpace {
  free: number;
  size: number;
}

/** The limit on a piped input: ENRICH_STDIN_LIMIT_MIB (a whole number of MiB), else SPOOL_LIMITS.maxBytes. */
export function stdinLimit(env: NodeJS.ProcessEnv): number {
  const raw = env['ENRICH_STDIN_LIMIT_MIB']?.trim();
  if (raw === undefined || raw === '') return SPOOL_LIMITS.maxBytes;
  if (!/^\d+$/.test(raw) || Number(raw) < 1) throw new InputError(`ENRICH_STDIN_LIMIT_MIB must be a whole number of MiB, 1 or more ('${raw}' given)`);
  return Number(raw) * 1024 * 1024;
}

/** Free space for an unprivileged user (bavail, not bfree); null where statfs cannot say. */
export function diskSpace(dir: string): DiskSpace | null {
  try {
    const s = statfsSync(dir);
    return { free: s.bavail * s.bsize, size: s.blocks * s.bsize };
  } catch {
    return null;
  }
}

const MiB = (n: number): string => `${Math.floor(n / 1024 / 1024)} MiB`;

const lineBreakAt = (chunk: Buffer, last: boolean): number => {
  const lf = last ? chunk.lastIndexOf(0x0a) : chunk.indexOf(0x0a);
  const cr = last ? chunk.lastIndexOf(0x0d) : chunk.indexOf(0x0d);
  if (lf === -1 || cr === -1) return Math.max(lf, cr);
  return last ? Math.max(lf, cr) : Math.min(lf, cr);
};

/** Checks each chunk before it is spooled; throws an InputError (exit 2) for a stream that cannot be CSV. */
export class SpoolGuard {
  private written = 0;
  /** Bytes since the last line break (LF or a lone CR: old Mac exports end lines with CR). */
  private line = 0;
  private nextFreeCheck = SPOOL_LIMITS.freeCheckBytes;

  constructor(
    private readonly displayName: string,
    private readonly dir: string,
    private readonly space: () => DiskSpace | null = () => diskSpace(dir),
    private readonly maxBytes: number = SPOOL_LIMITS.maxBytes,
  ) {}

  check(chunk: Buffer): void {
    const name = this.displayName;
    // The same words detectFormat uses for a file given by path.
    if (this.written === 0 && ((chunk[0] === 0xff && chunk[1] === 0xfe) || (chunk[0] === 0xfe && chunk[1] === 0xff))) {
      throw new InputError(`${name} is UTF-16 encoded; save it as UTF-8 CSV and run again`);
    }
    if (chunk.includes(0)) throw new InputError(`${name} is not a text file (it contains NUL bytes)`);
    // A line ending in this chunk is checked whole; lines between two breaks of a chunk are shorter than the chunk (tens of KiB).
    const first = lineBreakAt(chunk, false);
    const longest = first === -1 ? this.line + chunk.length : this.line + first;
    if (longest > SPOOL_LIMITS.maxLineBytes) {
      throw new InputError(`${name} is not CSV: more than ${MiB(SPOOL_LIMITS.maxLineBytes)} without a line break`);
    }
    this.line = first === -1 ? longest : chunk.length - 1 - lineBreakAt(chunk, true);
    this.written += chunk.length;
    if (this.written > this.maxBytes) {
      throw new InputError(
        `stopped reading ${name} at ${MiB(this.maxBytes)}: more than a CSV piped to enrich is taken to be; save it to a regular file and give that (no limit), or raise it with ENRICH_STDIN_LIMIT_MIB`,
      );
    }
    if (this.written >= this.nextFreeCheck) {
      this.nextFreeCheck = this.written + SPOOL_LIMITS.freeCheckBytes;
      this.checkFreeSpace();
    }
  }

  private checkFreeSpace(): void {
    const space = this.space();
    if (space === null) return;
    const floor = SPOOL_LIMITS.freeFloor(space.size);
    if (space.free < floor) {
      throw new InputError(
        `stopped reading ${this.displayName} after ${MiB(this.written)}: less than ${MiB(floor)} left free on the disk of ${this.dir}; set TMPDIR to a folder with more room, or give the input as a file`,
      );
    }
  }
}
