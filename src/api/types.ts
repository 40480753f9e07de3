/** Wire shapes of the callable endpoints (spec 2.1, 2.2). Unknown fields are tolerated (spec 9.2). */

export interface CompanySummary {
  domain: string;
  name: string;
}

export interface MatchResponse {
  matched: boolean;
  credits_charged: number;
  company: CompanySummary | null;
}

export interface CompanyRecord {
  domain: string;
  name: string;
  website_url: string | null;
  description: string | null;
  industry: string | null;
  employee_count: number | null;
  revenue_range: string | null;
  ownership_type: string | null;
  year_founded: number | null;
  specialties: string[];
  hq_country: string | null;
  hq_city: string | null;
  last_updated: string;
}

export interface EnrichResponse {
  matched: boolean;
  /** What the call cost by the spec's price (1 on a match, 0 on a miss), not the answer's own `credits_charged`, which may be missing or wrong. */
  credits_charged: number;
  /** The answer's own `credits_charged` when it is a count (for a note when it disagrees), else null. */
  credits_reported?: number | null;
  /** The balance after the call; NaN when the answer gave none, or a negative or non-finite one. */
  credits_remaining: number;
  company: CompanyRecord | null;
}

export const API_PREFIX = '/api/v1/public';
