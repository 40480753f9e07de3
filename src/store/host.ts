/**
 * Who this machine is in a store's runs (and whose dead processes it may judge): the host
 * name, unless ENRICH_HOST names it (a container whose host name changes every start; tests that
 * play several machines).
 */
export function hostIdentity(env: NodeJS.ProcessEnv): string | undefined {
  const named = env['ENRICH_HOST']?.trim();
  return named === undefined || named === '' ? undefined : named;
}
