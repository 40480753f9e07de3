import { readFileSync } from 'node:fs';

/**
 * Who this machine is in a store's runs (and whose dead processes it may judge): the host
 * name, unless ENRICH_HOST names it (a container whose host name changes every start; tests that
 * play several machines).
 */
/**
 * This boot of this machine (Linux's boot_id), or null where it cannot be told: a run's process id
 * means something only to the same boot of the same machine, and two machines configured with one
 * ENRICH_HOST (two containers from one image) never share one.
 */
export function bootId(): string | null {
  try {
    return readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim() || null;
  } catch {
    return null;
  }
}

export function hostIdentity(env: NodeJS.ProcessEnv): string | undefined {
  const named = env['ENRICH_HOST']?.trim();
  return named === undefined || named === '' ? undefined : named;
}
