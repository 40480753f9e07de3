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

/** Locks this process holds: a lock file naming our own pid is ours only if it is in here. */
const held = new Set<string>();

function readOwner(path: string): Owner | null {
  try {
    const owner = JSON.parse(readFileSync(path, 'utf8')) as Partial<Owner>;
    return typeof owner.pid === 'number' && typeof owner.host === 'string' ? (owner as Owner) : null;
  } catch {
    return null;
  }
}

function mtime(path: string): number {
  try {
    return statSync(path).mtimeMs;
  } catch {
    return 0;
  }
}

/**
 * A lock left by a run that is gone: on this host with its process dead (or with our own pid,
 * which a restarted container reuses, while we do not hold it), or unreadable and older than a
 * few seconds (torn while being written).
 */
function isStale(path: string, owner: Owner | null, now: number): boolean {
  if (owner === null) return now - mtime(path) > 5_000;
  if (owner.host !== hostname()) return false;
  if (owner.pid === process.pid) return !held.has(path);
  return !isProcessAlive(owner.pid);
}

const sameOwner = (a: Owner | null, b: Owner | null): boolean =>
  a === null || b === null ? a === b : a.pid === b.pid && a.host === b.host && a.started === b.started;

/** A short pause in synchronous code (lock contention only). */
const pause = (ms: number): void => {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
};

/**
 * Removes a stale lock, one run at a time: only the holder of `<lock>.takeover` (created
 * exclusively) may, and only if the lock still names the owner judged stale. Whoever then creates
 * the lock first wins; the others see a live lock. Two runs racing for one stale lock cannot both
 * win, and a live run's lock is never removed.
 */
function clearStale(path: string, judged: Owner | null, now: number): void {
  const token = `${path}.takeover`;
  let fd: number;
  try {
    fd = openSync(token, 'wx', 0o600);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    // Another run is taking over; a token left by a run killed mid-takeover goes after a while.
    if (now - mtime(token) > 10_000) rmQuietly(token);
    else pause(20);
    return;
  }
  try {
    if (sameOwner(readOwner(path), judged)) rmQuietly(path);
  } finally {
    closeSync(fd);
    rmQuietly(token);
  }
}

function rmQuietly(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    // already gone
  }
}

/**
 * One run per journal: `<journal>.lock`, created exclusively, naming its owner. A lock left by a
 * killed run is taken over; a live one is refused with who holds it.
 */
export function acquireLock(journalPath: string, now: () => number = Date.now): Lock {
  const path = `${journalPath}.lock`;
  for (let attempt = 0; attempt < 50; attempt++) {
    let fd: number;
    try {
      fd = openSync(path, 'wx', 0o600);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      const owner = readOwner(path);
      if (isStale(path, owner, now())) {
        clearStale(path, owner, now());
        continue;
      }
      const who = owner === null ? 'another enrich' : `another enrich (pid ${owner.pid} on ${owner.host}, since ${owner.started})`;
      throw new UsageError(`${journalPath} is in use by ${who}; wait for it to finish, or delete ${path} if that run is gone`);
    }
    writeSync(fd, JSON.stringify({ pid: process.pid, host: hostname(), started: new Date(now()).toISOString() }));
    closeSync(fd);
    held.add(path);
    let released = false;
    return {
      path,
      release: () => {
        if (released) return;
        released = true;
        held.delete(path);
        rmQuietly(path);
      },
    };
  }
  throw new UsageError(`cannot lock ${journalPath}: ${path} keeps reappearing`);
}
