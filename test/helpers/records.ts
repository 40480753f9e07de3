import type { CompanyRecord } from '../../src/api/types.js';
import type { KeptPurchase } from '../../src/store/purchase.js';
import type { Purchase, RunInfo, StoreEvent } from '../../src/store/types.js';

/** A company record as the service returns it, every optional field empty unless given. */
export function companyRecord(domain: string, over: Partial<CompanyRecord> = {}): CompanyRecord {
  return {
    domain,
    name: domain,
    website_url: null,
    description: null,
    industry: null,
    employee_count: null,
    revenue_range: null,
    ownership_type: null,
    year_founded: null,
    specialties: [],
    hq_country: null,
    hq_city: null,
    last_updated: '2026-01-01T00:00:00Z',
    ...over,
  };
}

/** What a run tells the store about itself, for store tests. */
export const runInfo: RunInfo = { inputName: 'in.csv', inputSha256: 'x', rows: 1, dryRun: false, options: {} };

/** A paid answer that bought `company` at generation `g`, under the key `k-<company>`. */
export const hitEvent = (company: string, g = 1): StoreEvent => ({ type: 'enrich', company, generation: g, keyVersion: 1, status: 'hit', charged: 1, record: companyRecord(company), keyUsed: `k-${company}` });

/** acme.com's first purchase, open and unclaimed, unless told otherwise. */
export const openPurchase = (over: Partial<Purchase> = {}): Purchase => ({
  domain: 'acme.com',
  generation: 1,
  keyVersion: 1,
  intentKey: null,
  uncertain: false,
  unconfirmed: 0,
  lostAt: null,
  settleMs: null,
  errorCode: null,
  outcome: 'open',
  closedAt: null,
  ...over,
});

/** acme.com's first purchase as a backend keeps it: bought (1 credit) by run 7, unless told otherwise. */
export const keptPurchase = (over: Partial<KeptPurchase> = {}): KeptPurchase => ({
  ...openPurchase({ outcome: 'hit', closedAt: 1_000 }),
  ownerRun: null,
  credits: 1,
  run: 7,
  openedAt: 900,
  person: null,
  reserved: 0,
  resumed: false,
  ...over,
});
