import { domainToASCII } from 'node:url';
import { normaliseDomain } from '../pipeline/normalise.js';
import type { CompanyRecord, CompanySummary } from './types.js';

/** Reading what a 200 carries: the documented fields only (spec 9.2: new ones are ignored), checked. */

export const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

/** The company's domain if it is a canonical registrable domain, else null: later calls (a paid enrich) take it, so "", "co.uk", a URL or an IP is a broken answer. */
export function canonicalDomain(v: unknown, asked?: string): string | null {
  if (typeof v !== 'string') return null;
  // Usually the very domain asked, normalised before it was sent: no need to parse it again per answer.
  if (v === asked) return v;
  const normalised = normaliseDomain(v);
  if (!normalised.ok) return null;
  const plain = v.trim().toLowerCase().replace(/\.$/, '');
  return normalised.domain === plain || normalised.domain === domainToASCII(plain) ? normalised.domain : null;
}

export type Parsed<T> = { ok: true; value: T } | { ok: false; why: string };

/** `asked`: the domain the request named, already in canonical form (see canonicalDomain). */
export function asSummary(v: unknown, asked?: string): Parsed<CompanySummary> {
  if (!isObject(v)) return { ok: false, why: 'matched: true but no company' };
  if (typeof v['name'] !== 'string') return { ok: false, why: 'a company without a name' };
  const domain = canonicalDomain(v['domain'], asked);
  if (domain === null) return { ok: false, why: `a company whose domain ${JSON.stringify(v['domain']) ?? 'undefined'} is not a registrable domain` };
  return { ok: true, value: { domain, name: v['name'] } };
}

export function asRecord(v: unknown, asked?: string): Parsed<CompanyRecord> {
  const summary = asSummary(v, asked);
  if (!summary.ok || !isObject(v)) return summary.ok ? { ok: false, why: 'no company' } : summary;
  const str = (k: string): string | null => (typeof v[k] === 'string' ? (v[k] as string) : null);
  const num = (k: string): number | null => (typeof v[k] === 'number' && Number.isFinite(v[k]) ? (v[k] as number) : null);
  const specialties = Array.isArray(v['specialties']) ? v['specialties'].filter((s): s is string => typeof s === 'string') : [];
  // Every field in one literal: a spread plus new fields costs V8 microseconds per object, for every record bought.
  return {
    ok: true,
    value: {
      domain: summary.value.domain,
      name: summary.value.name,
      website_url: str('website_url'),
      description: str('description'),
      industry: str('industry'),
      employee_count: num('employee_count'),
      revenue_range: str('revenue_range'),
      ownership_type: str('ownership_type'),
      year_founded: num('year_founded'),
      specialties,
      hq_country: str('hq_country'),
      hq_city: str('hq_city'),
      last_updated: str('last_updated') ?? '',
    },
  };
}

/** Spec 2.2 and 8.4: an enrich costs 1 credit on a match and nothing on a miss. */
export const ENRICH_PRICE = { match: 1, miss: 0 } as const;

/** A count of credits as the answer states it, or null when it is not one (missing, a string, -1, NaN). */
export function statedCredits(v: unknown): number | null {
  return typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : null;
}
