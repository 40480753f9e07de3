import { InputError } from '../errors.js';

/** Header names that hold a company's domain, best first; compared case-, space- and underscore-blind. */
const CANDIDATES = [
  'domain',
  'company domain',
  'domain name',
  'website',
  'company website',
  'website url',
  'company website url',
  'web site',
  'url',
  'company url',
  'homepage',
  'home page',
  'web',
  'site',
  'company site',
  'organization domain',
  'organisation domain',
  'account domain',
  'account website',
  'email domain',
] as const;

export const canonicalHeader = (name: string): string =>
  name
    .replace(/^\ufeff/, '')
    .trim()
    // `Name, "Web"`: a space before the quote leaves the quotes in the field.
    .replace(/^"(.*)"$/, '$1')
    .trim()
    .toLowerCase()
    .replace(/[\s_\-.]+/g, ' ');

/** The domain column: the one `--column` names, else the best-ranked known header; the error lists the headers seen, for --column. */
export function findDomainColumn(header: readonly string[], requested: string | undefined): number {
  const canon = header.map(canonicalHeader);
  if (requested !== undefined) {
    const exact = header.indexOf(requested);
    if (exact !== -1) return exact;
    const loose = canon.indexOf(canonicalHeader(requested));
    if (loose !== -1) return loose;
    throw new InputError(`no column named "${requested}"; the header has: ${listHeaders(header)}`);
  }
  for (const candidate of CANDIDATES) {
    const i = canon.indexOf(candidate);
    if (i !== -1) return i;
  }
  throw new InputError(`cannot tell which column holds the domains; pass --column <name>. The header has: ${listHeaders(header)}`);
}

function listHeaders(header: readonly string[]): string {
  const shown = header.slice(0, 20).map((h) => JSON.stringify(h.trim()));
  return shown.join(', ') + (header.length > 20 ? `, … (${header.length} columns)` : '');
}
