import { readFileSync } from 'node:fs';

/**
 * Whether a process with this pid runs on this host (EPERM: it exists, owned by someone else). A
 * zombie, dead but not yet reaped by its parent (a container whose PID 1 reaps nothing), answers
 * the signal check as if alive: on Linux its state in /proc says it is not.
 */
export function isProcessAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  return !isZombie(pid);
}

function isZombie(pid: number): boolean {
  const state = statFields(pid)?.[0];
  return state === 'Z' || state === 'X';
}

/**
 * The fields of Linux's /proc/<pid>/stat after the command name (the state first), which is in
 * parentheses and may hold any character; null where that cannot be read.
 */
function statFields(pid: number): string[] | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return null;
  }
}

/**
 * When a process on this host started (ms since the epoch), from Linux's /proc; null where that
 * cannot be read (another OS, or the process is gone). Tells a live run from a reused pid.
 */
export function processStartedAt(pid: number): number | null {
  const fields = statFields(pid);
  if (fields === null) return null;
  try {
    const ticks = Number(fields[19]);
    const boot = /^btime (\d+)$/m.exec(readFileSync('/proc/stat', 'utf8'))?.[1];
    if (boot === undefined || !Number.isFinite(ticks)) return null;
    // Clock ticks are 100 a second on every Linux this runs on (USER_HZ).
    return Number(boot) * 1000 + ticks * 10;
  } catch {
    return null;
  }
}
