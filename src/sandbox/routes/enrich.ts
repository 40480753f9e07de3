import type { IncomingMessage } from 'node:http';
import { registrableDomain } from '../domain.js';
import type { Account, StoredResponse } from '../accounts.js';
import { admit, fail, faulted, JSON_TYPE, PROBLEM_TYPE, type Answer, type HandlerConfig } from '../answer.js';
import { toRecord } from '../directory.js';
import { bump } from './match.js';

/** POST /company/enrich, the paid call: validation (422), replay, fault (500), credits (402), charge and answer. Errors never charge (spec 7 rule 2). */
export function enrich(config: HandlerConfig, req: IncomingMessage, rawBody: string, requestId: string): Answer {
  const admitted = admit(config, req, requestId);
  if ('answer' in admitted) return admitted.answer;
  const { account } = admitted;

  let parsed: unknown;
  try {
    parsed = JSON.parse(rawBody);
  } catch {
    return fail(config, 422, 'validation_error', requestId, 'the body must be a JSON object');
  }
  const domainValue = parsed !== null && typeof parsed === 'object' ? (parsed as { domain?: unknown }).domain : undefined;
  if (typeof domainValue !== 'string' || domainValue.trim() === '') return fail(config, 422, 'validation_error', requestId, 'the body field domain is required');
  const domain = registrableDomain(domainValue);
  if (domain === null) return fail(config, 422, 'validation_error', requestId, 'domain is not a registrable domain');

  bump(config.stats.enrichCalls, domain);
  const header = req.headers['idempotency-key'];
  const idempotencyKey = typeof header === 'string' ? header : null;
  if (idempotencyKey !== null && (idempotencyKey.length === 0 || idempotencyKey.length > 255)) {
    return fail(config, 422, 'validation_error', requestId, 'Idempotency-Key must be 1 to 255 characters');
  }
  const fingerprint = canonicalJson(parsed);
  if (idempotencyKey !== null) {
    const stored = account.idempotency.get(idempotencyKey);
    if (stored !== undefined) {
      if (stored.fingerprint !== fingerprint) {
        return fail(config, 422, 'validation_error', requestId, 'this Idempotency-Key was already used with a different request body');
      }
      config.stats.replays++;
      return replay(config, stored, requestId);
    }
  }

  // From here on the request has executed: its key keeps a 200 always, errors only in `stripe` mode.
  const answer = execute(config, account, domain, idempotencyKey, requestId);
  if (idempotencyKey !== null && (answer.status === 200 || config.idempotency === 'stripe')) {
    const store: StoredResponse = { fingerprint, status: answer.status, contentType: answer.contentType, body: answer.body, requestId };
    account.idempotency.set(idempotencyKey, store);
  }
  return answer;
}

/** A stored answer sent again, carrying the request id `replayRequestId` asks for. */
function replay(config: HandlerConfig, stored: StoredResponse, requestId: string): Answer {
  const mode = config.replayRequestId;
  const id = mode === 'original' ? stored.requestId : mode === 'fresh' ? requestId : null;
  const body = stored.contentType === PROBLEM_TYPE && mode !== 'original' ? withRequestId(stored.body, id) : stored.body;
  return { status: stored.status, contentType: stored.contentType, body, headers: { 'idempotent-replayed': 'true' }, requestId: id, delay: true };
}

function execute(config: HandlerConfig, account: Account, domain: string, idempotencyKey: string | null, requestId: string): Answer {
  if (faulted(config)) return fail(config, 500, 'internal', requestId, 'injected fault');
  const company = config.directory.lookup(domain);
  if (company === undefined) {
    return { status: 200, contentType: JSON_TYPE, body: JSON.stringify({ matched: false, credits_charged: 0, credits_remaining: account.balance, company: null }), delay: true };
  }
  if (account.balance < 1) {
    return fail(config, 402, 'insufficient_credits', requestId, `balance ${account.balance}, this call needs 1`, { balance: account.balance, required: 1 });
  }
  config.accounts.charge(account, company.domain, idempotencyKey, requestId, new Date());
  const body = JSON.stringify({ matched: true, credits_charged: 1, credits_remaining: account.balance, company: toRecord(company) });
  return { status: 200, contentType: JSON_TYPE, body, delay: true };
}

/** A stored problem document with its requestId replaced, or removed for null. */
function withRequestId(body: string, requestId: string | null): string {
  const doc = JSON.parse(body) as Record<string, unknown>;
  if (requestId === null) delete doc['requestId'];
  else doc['requestId'] = requestId;
  return JSON.stringify(doc);
}

/** JSON with sorted keys, so `{"a":1,"b":2}` and `{"b":2, "a":1}` count as the same body. */
function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const entries = Object.keys(value as object)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${canonicalJson((value as Record<string, unknown>)[k])}`);
  return `{${entries.join(',')}}`;
}
