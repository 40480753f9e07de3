import { closeSync, openSync, readFileSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';
import { UsageError } from '../errors.js';
import { isProcessAlive } from '../process-alive.js';

export interface Lock {
  readonly path: string;
  release(): void;
}

interface Owner {
  pid: number;
  host: string;
  started: string;
}

function readOwner(path: string): Owner | null {
  try {
    const owner = JSON.parse(readFileSync(path, 'utf8')) as Partial<Owner>;
    return typeof owner.pid === 'number' && typeof owner.host === 'string' ? (owner as Owner) : null;
  } catch {
    return null;
  }
}

/**
 * One run per journal: `<journal>.lock`, created exclusively, naming its owner. A lock left by a
 * killed run (same host, process gone; or unreadable and older than a few seconds) is taken over.
 */
export function acquireLock(journalPath: string, now: () => number = Date.now): Lock {
  const path = `${journalPath}.lock`;
  for (let attempt = 0; attempt < 3; attempt++) {
    let fd: number;
    try {
      fd = openSync(path, 'wx', 0o600);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      const owner = readOwner(path);
      const stale = owner === null
        ? now() - statMtime(path) > 5_000
        : owner.host === hostname() && owner.pid !== process.pid && !isProcessAlive(owner.pid);
      if (stale) {
        try {
          unlinkSync(path);
        } catch {
          // another run took it over first; the next attempt sees its lock
        }
        continue;
      }
      const who = owner === null ? 'another enrich' : `another enrich (pid ${owner.pid} on ${owner.host}, since ${owner.started})`;
      throw new UsageError(`${journalPath} is in use by ${who}; wait for it to finish, or delete ${path} if that run is gone`);
    }
    writeSync(fd, JSON.stringify({ pid: process.pid, host: hostname(), started: new Date(now()).toISOString() }));
    closeSync(fd);
    let released = false;
    return {
      path,
      release: () => {
        if (released) return;
        released = true;
        try {
          unlinkSync(path);
        } catch {
          // already gone
        }
      },
    };
  }
  throw new UsageError(`cannot lock ${journalPath}: ${path} keeps reappearing`);
}

function statMtime(path: string): number {
  try {
    return statSync(path).mtimeMs;
  } catch {
    return 0;
  }
}
