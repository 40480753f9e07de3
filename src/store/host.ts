import { readFileSync, readlinkSync } from 'node:fs';

/**
 * Where a run's process id means something: this boot of this kernel (Linux's boot_id) and this
 * process's pid namespace (each container has its own, on a kernel its host shares), or null where
 * it cannot be told. Two machines, or two containers, configured with one ENRICH_HOST never share
 * one, so neither judges the other's pid; where it is null, runs are judged by their leases alone.
 */
export function bootId(): string | null {
  try {
    const boot = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
    const pids = readlinkSync('/proc/self/ns/pid');
    return boot === '' || pids === '' ? null : `${boot} ${pids}`;
  } catch {
    return null;
  }
}

/**
 * Who this machine is in a store's runs (and whose dead processes it may judge): the host
 * name, unless ENRICH_HOST names it (a container whose host name changes every start; tests that
 * play several machines).
 */
export function hostIdentity(env: NodeJS.ProcessEnv): string | undefined {
  const named = env['ENRICH_HOST']?.trim();
  return named === undefined || named === '' ? undefined : named;
}
