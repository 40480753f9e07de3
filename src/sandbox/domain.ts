import { getDomain } from 'tldts';

/**
 * The service's own reading of a `domain` parameter (spec 4.1, 4.2: "a registrable domain; a full
 * URL or a leading `www.` is accepted and normalised"), written from the spec rather than taken
 * from the client (pipeline/normalise.ts), so a normalisation bug of the client's shows as a
 * disagreement with the sandbox instead of being shared by both. Null: not a registrable domain.
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
