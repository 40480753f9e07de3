import { parse } from 'tldts';
import { domainToASCII } from 'node:url';

/** Why a value could not become a registrable domain; shown in `enrich_error` for `invalid` rows. */
export type InvalidReason = 'empty' | 'not_a_domain' | 'ip_address' | 'public_suffix' | 'unknown_suffix';

export type Normalised = { ok: true; domain: string } | { ok: false; reason: InvalidReason };

const PLACEHOLDERS = new Set(['n/a', 'na', 'none', 'null', 'nil', '-', '--', 'tbd', 'unknown', '?']);
const SCHEME = /^[a-z][a-z0-9+.-]*:\/\//i;

/**
 * Reduces a "website" value to the registrable domain the service keys on (`https://www.Shop.Example.co.uk:8443/x` -> `example.co.uk`)
 * by the Public Suffix List with its private section (`acme.myshopify.com` stays a company); IDNs as punycode. Changes bump SCAN_RULES.
 */
export function normaliseDomain(raw: string): Normalised {
  // Quotes left in a field (`, "acme.com"`) and link brackets (`<https://acme.com>`) are not part of it.
  let value = raw.trim().replace(/^(["'<])(.*)(["'>])$/s, (whole, open: string, inner: string, close: string) =>
    (open === '<' ? close === '>' : open === close) ? inner.trim() : whole,
  );
  if (value === '') return { ok: false, reason: 'empty' };
  // Two values in one cell (a quoted newline, a tab): URL parsing would drop the control characters
  // and glue them into one host, which may name a real company, so the cell is not a domain.
  // eslint-disable-next-line no-control-regex -- control characters are exactly what it looks for
  if (/[\x00-\x1f\x7f]/.test(value)) return { ok: false, reason: 'not_a_domain' };
  if (PLACEHOLDERS.has(value.toLowerCase())) return { ok: false, reason: 'not_a_domain' };
  // A contact address in the website column still names the company's domain.
  if (!SCHEME.test(value) && /^[^\s/@]+@[^\s/@]+$/.test(value)) value = value.slice(value.indexOf('@') + 1);
  // tldts parses bare hosts as well as URLs; give it a scheme so "example.com:8080/x" reads as a URL.
  if (!SCHEME.test(value) && !value.startsWith('//')) value = `http://${value}`;

  const parsed = parse(value, { allowPrivateDomains: true, extractHostname: true, validateHostname: true });
  if (parsed.isIp) return { ok: false, reason: 'ip_address' };
  if (parsed.hostname === null || parsed.hostname === '') return { ok: false, reason: 'not_a_domain' };
  if (parsed.domain === null) {
    return { ok: false, reason: parsed.publicSuffix === parsed.hostname && parsed.hostname.includes('.') ? 'public_suffix' : 'not_a_domain' };
  }
  // A suffix outside the list (the "*" fallback) is a typo or an internal name, not a company.
  if (parsed.isIcann !== true && parsed.isPrivate !== true) return { ok: false, reason: 'unknown_suffix' };

  // tldts lowercases; only an IDN needs converting to its punycode form.
  const ascii = /^[\x21-\x7e]*$/.test(parsed.domain) ? parsed.domain : domainToASCII(parsed.domain);
  if (ascii === '' || ascii.length > 253) return { ok: false, reason: 'not_a_domain' };
  return { ok: true, domain: ascii };
}
