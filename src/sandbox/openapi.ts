import { API_PREFIX } from '../api/types.js';

const nullable = (type: string): Record<string, unknown> => ({ type: [type, 'null'] });
const problemRef = (description: string): Record<string, unknown> => ({
  description,
  content: { 'application/problem+json': { schema: { $ref: '#/components/schemas/Problem' } } },
});
const errors = {
  '401': problemRef('invalid_token: missing, malformed, unknown or revoked key (one identical answer)'),
  '402': problemRef('insufficient_credits: carries balance and required; nothing charged'),
  '403': problemRef('insufficient_scope: the key lacks search:read'),
  '422': problemRef('validation_error: missing or unparseable domain or body'),
  '429': {
    ...problemRef('rate_limited: carries retryAfterSeconds; a Retry-After header is also sent'),
    headers: { 'Retry-After': { schema: { type: 'integer' }, description: 'Seconds to wait' } },
  },
  '500': problemRef('internal: nothing charged; retry with backoff'),
};

/** The machine-readable description: callable endpoints only, each marked with its availability (spec 9.5). */
export function openapiDocument(serverUrl: string): Record<string, unknown> {
  return {
    openapi: '3.1.0',
    info: {
      title: 'Company data service (enrich sandbox)',
      version: 'v1',
      description: 'Company match (free) and enrich (1 credit per match). Errors are RFC 9457 problem documents; branch on `code`.',
    },
    servers: [{ url: `${serverUrl}${API_PREFIX}` }],
    security: [{ bearer: [] }],
    paths: {
      '/company/match': {
        get: {
          operationId: 'matchCompany',
          'x-availability': 'beta',
          summary: 'Resolve a domain to a company held (free)',
          parameters: [
            { name: 'domain', in: 'query', required: true, schema: { type: 'string' }, description: 'Registrable domain; a URL or leading www. is normalised' },
          ],
          responses: {
            '200': { description: 'Match view; a miss is matched: false', content: { 'application/json': { schema: { $ref: '#/components/schemas/MatchView' } } } },
            ...errors,
          },
        },
      },
      '/company/enrich': {
        post: {
          operationId: 'enrichCompany',
          'x-availability': 'beta',
          summary: 'The full company record (1 credit per match, 0 on a miss)',
          parameters: [
            { name: 'Idempotency-Key', in: 'header', required: false, schema: { type: 'string', maxLength: 255 }, description: 'A retry with the same key replays the stored response and charges nothing' },
          ],
          requestBody: {
            required: true,
            content: { 'application/json': { schema: { type: 'object', required: ['domain'], properties: { domain: { type: 'string' } } } } },
          },
          responses: {
            '200': { description: 'Company record', content: { 'application/json': { schema: { $ref: '#/components/schemas/CompanyRecord' } } } },
            ...errors,
          },
        },
      },
    },
    components: {
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer', description: 'Workspace API key; company endpoints need scope search:read' } },
      schemas: {
        CompanySummary: {
          type: 'object',
          required: ['domain', 'name'],
          properties: { domain: { type: 'string' }, name: { type: 'string' } },
        },
        MatchView: {
          type: 'object',
          required: ['matched', 'credits_charged', 'company'],
          properties: {
            matched: { type: 'boolean' },
            credits_charged: { type: 'number', const: 0 },
            company: { oneOf: [{ $ref: '#/components/schemas/CompanySummary' }, { type: 'null' }] },
          },
        },
        Company: {
          type: 'object',
          required: ['domain', 'name', 'specialties', 'last_updated'],
          properties: {
            domain: { type: 'string' },
            name: { type: 'string' },
            website_url: nullable('string'),
            description: nullable('string'),
            industry: nullable('string'),
            employee_count: nullable('number'),
            revenue_range: nullable('string'),
            ownership_type: nullable('string'),
            year_founded: nullable('number'),
            specialties: { type: 'array', items: { type: 'string' } },
            hq_country: nullable('string'),
            hq_city: nullable('string'),
            last_updated: { type: 'string', format: 'date-time' },
          },
        },
        CompanyRecord: {
          type: 'object',
          required: ['matched', 'credits_charged', 'credits_remaining', 'company'],
          properties: {
            matched: { type: 'boolean' },
            credits_charged: { type: 'number' },
            credits_remaining: { type: 'number' },
            company: { oneOf: [{ $ref: '#/components/schemas/Company' }, { type: 'null' }] },
          },
        },
        Problem: {
          type: 'object',
          required: ['type', 'title', 'status', 'code'],
          properties: {
            type: { type: 'string', format: 'uri' },
            title: { type: 'string' },
            status: { type: 'integer' },
            code: { type: 'string' },
            detail: { type: 'string' },
            requestId: { type: 'string' },
            retryAfterSeconds: { type: 'integer' },
            balance: { type: 'integer' },
            required: { type: 'integer' },
          },
        },
      },
    },
  };
}
