import { getDomain } from 'tldts';

/**
 * The service's own reading of a `domain` (spec 4.1, 4.2: a URL or leading `www.` is normalised), written from the spec, not shared with the
 * client's pipeline/normalise.ts, so a client bug shows as a disagreement instead of being shared. Null: not a registrable domain.
 */
export function registrableDomain(raw: string): string | null {
  const value = raw.trim();
  if (value === '' || /\s/.test(value)) return null;
  let host: string;
  try {
    host = new URL(/^[a-z][a-z0-9+.-]*:\/\//i.test(value) ? value : `http://${value}`).hostname;
  } catch {
    return null;
  }
  host = host.replace(/\.$/, '');
  // An IP address names no company.
  if (host.startsWith('[') || /^\d+(\.\d+){3}$/.test(host)) return null;
  return getDomain(host, { allowPrivateDomains: true, validateHostname: true });
}
