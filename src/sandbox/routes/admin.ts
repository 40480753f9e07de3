import type { IncomingMessage } from 'node:http';
import { fail, JSON_TYPE, type Answer, type HandlerConfig } from '../answer.js';

/** /_sandbox/ledger, /stats and /topup: the sandbox's own controls, for any valid key. */
export function admin(config: HandlerConfig, req: IncomingMessage, path: string, rawBody: string, requestId: string): Answer {
  const account = config.accounts.authenticate(req.headers.authorization);
  if (account === undefined) return fail(config, 401, 'invalid_token', requestId);
  if (path === '/_sandbox/ledger' && req.method === 'GET') {
    const charged = account.ledger.reduce((n, e) => n + e.credits, 0);
    return { status: 200, contentType: JSON_TYPE, body: JSON.stringify({ balance: account.balance, charged, entries: account.ledger }) };
  }
  if (path === '/_sandbox/stats' && req.method === 'GET') {
    const { matchCalls, enrichCalls, ...counters } = config.stats;
    return { status: 200, contentType: JSON_TYPE, body: JSON.stringify({ ...counters, matchDomains: matchCalls.size, enrichDomains: enrichCalls.size }) };
  }
  if (path === '/_sandbox/topup' && req.method === 'POST') {
    let credits: unknown;
    try {
      credits = (JSON.parse(rawBody) as { credits?: unknown }).credits;
    } catch {
      credits = undefined;
    }
    if (typeof credits !== 'number' || !Number.isInteger(credits) || credits <= 0) {
      return fail(config, 422, 'validation_error', requestId, 'credits must be a positive integer');
    }
    account.balance += credits;
    return { status: 200, contentType: JSON_TYPE, body: JSON.stringify({ balance: account.balance }) };
  }
  return fail(config, 404, 'not_found', requestId, `no sandbox route ${req.method ?? ''} ${path}`);
}
