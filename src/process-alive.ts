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

/**
 * Whether a run of this host, in process `pid`, registered at `startedAt` (ms, this host's clock),
 * is gone: its process is, or the pid now belongs to a program that started after the run did (a
 * reused pid) and the run's heartbeat has stopped (`beating` false). A clock set forward since the
 * run began (an NTP step, a VM resumed) also makes its own process look started after it: the
 * heartbeat tells the two apart, so a live run is never taken for gone, and its purchases never
 * bought again under new keys beside it (review: a 10 s step did, with `ledger release`).
 */
export function goneOnThisHost(pid: number, startedAt: number, beating: () => boolean): boolean {
  if (!isProcessAlive(pid)) return true;
  const started = processStartedAt(pid);
  return started !== null && started > startedAt + 5_000 && !beating();
}
