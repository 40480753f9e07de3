import { readFileSync } from 'node:fs';
import { readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';

/** Whether a process with this pid runs on this host (EPERM: someone else's). A zombie (a container whose PID 1 reaps nothing) passes the signal check; /proc says it is not alive. */
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

/** The fields of /proc/<pid>/stat after the command name (which is in parentheses and may hold anything); null where unreadable. */
function statFields(pid: number): string[] | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return null;
  }
}

/** When a process on this host started (ms), from /proc; null where unreadable (another OS, a gone process). Tells a live run from a reused pid. */
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
 * Whether a run of this host in process `pid`, registered at `startedAt`, is gone: no process, or a reused pid (started after the run) with
 * the heartbeat stopped. A clock set forward also makes the run's own process look newer; the heartbeat tells them apart, so a live run is never
 * taken for gone and its purchases bought again under new keys.
 */
export function goneOnThisHost(pid: number, startedAt: number, beating: () => boolean): boolean {
  if (!isProcessAlive(pid)) return true;
  const started = processStartedAt(pid);
  return started !== null && started > startedAt + 5_000 && !beating();
}

/** Removes the files in `dir` that `pidOf` names a process of this host for (their writer's pid) whose process is gone: what kill -9 left. */
export async function removeOfDeadProcesses(dir: string, pidOf: (name: string) => number): Promise<void> {
  for (const name of await readdir(dir).catch(() => [] as string[])) {
    const pid = pidOf(name);
    if (Number.isInteger(pid) && pid !== process.pid && !isProcessAlive(pid)) await rm(join(dir, name), { force: true });
  }
}
