import type { IncomingMessage } from 'node:http';
import { registrableDomain } from '../domain.js';
import { admit, fail, faulted, JSON_TYPE, type Answer, type HandlerConfig } from '../answer.js';

/** GET /company/match: free, never charged. */
export function match(config: HandlerConfig, req: IncomingMessage, query: string, requestId: string): Answer {
  const admitted = admit(config, req, requestId);
  if ('answer' in admitted) return admitted.answer;
  const raw = new URLSearchParams(query).get('domain');
  if (raw === null || raw.trim() === '') return fail(config, 422, 'validation_error', requestId, 'the query parameter domain is required');
  const domain = registrableDomain(raw);
  if (domain === null) return fail(config, 422, 'validation_error', requestId, 'domain is not a registrable domain');
  bump(config.stats.matchCalls, domain);
  if (faulted(config)) return fail(config, 500, 'internal', requestId, 'injected fault');
  const company = config.directory.lookup(domain);
  const body = company === undefined
    ? '{"matched":false,"credits_charged":0,"company":null}'
    : JSON.stringify({ matched: true, credits_charged: 0, company: { domain: company.domain, name: company.name } });
  return { status: 200, contentType: JSON_TYPE, body, delay: true };
}

export const bump = (counts: Map<string, number>, key: string): void => {
  counts.set(key, (counts.get(key) ?? 0) + 1);
};
