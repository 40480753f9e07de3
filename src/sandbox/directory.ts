import { readFileSync } from 'node:fs';
import type { CompanyRecord } from '../api/types.js';
import { PACKAGE_ROOT } from '../package-root.js';

export interface FixtureCompany extends CompanyRecord {
  aliases: string[];
}

/** The companies the sandbox holds, reachable by canonical domain or any alias. */
export class CompanyDirectory {
  private readonly byDomain = new Map<string, FixtureCompany>();
  readonly size: number;

  constructor(companies: Iterable<FixtureCompany>) {
    let n = 0;
    for (const company of companies) {
      n++;
      this.byDomain.set(company.domain, company);
      for (const alias of company.aliases) this.byDomain.set(alias, company);
    }
    this.size = n;
  }

  static fromJsonl(path: string | URL): CompanyDirectory {
    const text = readFileSync(path, 'utf8');
    const companies: FixtureCompany[] = [];
    for (const line of text.split('\n')) if (line.trim() !== '') companies.push(JSON.parse(line) as FixtureCompany);
    return new CompanyDirectory(companies);
  }

  lookup(domain: string): FixtureCompany | undefined {
    return this.byDomain.get(domain);
  }

  *[Symbol.iterator](): IterableIterator<FixtureCompany> {
    const seen = new Set<FixtureCompany>();
    for (const company of this.byDomain.values()) {
      if (seen.has(company)) continue;
      seen.add(company);
      yield company;
    }
  }
}

export const DEFAULT_COMPANIES = new URL('fixtures/companies.jsonl', PACKAGE_ROOT);

/** The response record: the spec's fields in the spec's order, nothing sandbox-internal. */
export function toRecord(c: FixtureCompany): CompanyRecord {
  return {
    domain: c.domain,
    name: c.name,
    website_url: c.website_url,
    description: c.description,
    industry: c.industry,
    employee_count: c.employee_count,
    revenue_range: c.revenue_range,
    ownership_type: c.ownership_type,
    year_founded: c.year_founded,
    specialties: c.specialties,
    hq_country: c.hq_country,
    hq_city: c.hq_city,
    last_updated: c.last_updated,
  };
}
