import type { IncomingMessage, ServerResponse } from 'node:http';
import { API_PREFIX } from '../api/types.js';
import { asAnswer, fail, JSON_TYPE, type Answer, type HandlerConfig } from './answer.js';
import { problem } from './problem.js';
import { admin } from './routes/admin.js';
import { enrich } from './routes/enrich.js';
import { match } from './routes/match.js';

export type { HandlerConfig, IdempotencyMode, ReplayRequestId, SandboxStats } from './answer.js';

const MATCH = `${API_PREFIX}/company/match`;
const ENRICH = `${API_PREFIX}/company/enrich`;
const OPENAPI = `${API_PREFIX}/openapi.json`;
const PLANNED = new Set([`${API_PREFIX}/search`, `${API_PREFIX}/person/enrich`]);
const MAX_BODY = 16 * 1024;

/** The service's rules in the order a request meets them: auth (401/403), rate limit (429), validation (422), replay, fault (500), credits (402), charge. Errors never charge (spec 7). */
export function createHandler(config: HandlerConfig): (req: IncomingMessage, res: ServerResponse) => void {
  let seq = 0;
  return (req, res) => {
    config.stats.requests++;
    const requestId = `req_${(++seq).toString(36).padStart(7, '0')}`;
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q === -1 ? url : url.slice(0, q);
    const query = q === -1 ? '' : url.slice(q + 1);

    if (req.method === 'GET' || req.method === 'HEAD') {
      req.resume();
      send(config, res, requestId, route(config, req, path, query, '', requestId));
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    let tooLarge = false;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_BODY) tooLarge = true;
      else chunks.push(chunk);
    });
    req.on('end', () => {
      const answer = tooLarge
        ? fail(config, 422, 'validation_error', requestId, `the body exceeds ${MAX_BODY} bytes`)
        : route(config, req, path, query, Buffer.concat(chunks).toString('utf8'), requestId);
      send(config, res, requestId, answer);
    });
  };
}

function route(config: HandlerConfig, req: IncomingMessage, path: string, query: string, body: string, requestId: string): Answer {
  const method = req.method ?? 'GET';
  if (path === MATCH) return method === 'GET' ? match(config, req, query, requestId) : notAllowed(config, 'GET', method, requestId);
  if (path === ENRICH) return method === 'POST' ? enrich(config, req, body, requestId) : notAllowed(config, 'POST', method, requestId);
  if (path === OPENAPI && method === 'GET') return { status: 200, contentType: JSON_TYPE, body: config.openapi() };
  if (PLANNED.has(path)) return fail(config, 501, 'not_callable', requestId, `${path.slice(API_PREFIX.length)} is documented as planned and does not answer yet`);
  if (path.startsWith('/_sandbox/')) return admin(config, req, path, body, requestId);
  return fail(config, 404, 'not_found', requestId, `no endpoint ${method} ${path}`);
}

function notAllowed(config: HandlerConfig, allow: string, method: string, requestId: string): Answer {
  const p = problem(config.typeBase, 405, 'method_not_allowed', requestId, `${method} is not allowed here; use ${allow}`);
  return { ...asAnswer(p), headers: { allow } };
}

/** Sends an answer, after the drawn latency when it asks for one, or drops the connection (dropRate). */
function send(config: HandlerConfig, res: ServerResponse, requestId: string, a: Answer): void {
  const { stats } = config;
  const dropped = a.delay === true && config.dropRate > 0 && config.random() < config.dropRate;
  if (dropped) stats.dropped++;
  else stats.byStatus[a.status] = (stats.byStatus[a.status] ?? 0) + 1;
  const write = (): void => {
    if (res.destroyed) return;
    if (dropped) {
      res.socket?.destroy();
      return;
    }
    const id = a.requestId === undefined ? requestId : a.requestId;
    res.writeHead(a.status, { 'content-type': a.contentType, ...(id === null ? {} : { 'x-request-id': id }), ...a.headers });
    res.end(a.body);
  };
  const delay = a.delay === true ? config.latency() : 0;
  if (delay > 0) setTimeout(write, delay);
  else write();
}
