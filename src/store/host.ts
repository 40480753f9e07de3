import { readFileSync, readlinkSync } from 'node:fs';

/**
 * Where a pid means something: this boot (Linux boot_id) and pid namespace, or null where unknown. Machines or containers
 * sharing one ENRICH_HOST then never judge each other's pids; with null, runs are judged by their leases alone.
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

/** Who this machine is in a store's runs: ENRICH_HOST if set (containers whose host name changes; tests), else the host name. */
export function hostIdentity(env: NodeJS.ProcessEnv): string | undefined {
  const named = env['ENRICH_HOST']?.trim();
  return named === undefined || named === '' ? undefined : named;
}
