import { createRequire } from 'node:module';
import type { Dispatcher } from 'undici';
import { CallerAborted, type Answer, type ExchangeLimits } from '../../src/api/exchange.js';
import { DeadlineExceeded } from '../../src/api/network.js';

// The bench's stand-in for src/api/exchange.ts without its dispatch handler: the same contract
// (whole-request deadline, caller's abort, size bound) on undici's request(). Issue 20 measured a
// 20,000-domain run with it at 1.31x the CPU (median of 7 pairs, 1.20-1.38): the handler stayed.

type Request = (this: Dispatcher, options: Dispatcher.RequestOptions) => Promise<Dispatcher.ResponseData>;
let requestApi: Request | undefined;

/**
 * undici's `request()`, called on the dispatcher: the pool is loaded from its own file (see
 * createDispatcher in client.ts), which leaves out the API methods undici's entry adds to it.
 */
function request(dispatcher: Dispatcher, options: Dispatcher.RequestOptions): Promise<Dispatcher.ResponseData> {
  if (requestApi === undefined) {
    const require = createRequire(import.meta.url);
    try {
      requestApi = require('undici/lib/api/api-request.js') as Request;
    } catch {
      requestApi = (require('undici') as { Dispatcher: { prototype: { request: Request } } }).Dispatcher.prototype.request;
    }
  }
  return requestApi.call(dispatcher, options);
}

/**
 * Sends one request on `dispatcher` (undici's `request()`) and reads its answer, the whole of it
 * within the deadline: a body dripped a byte at a time, never idle, ends there too. A body over
 * `maxBytes` (declared or counted) is reported unread and its connection dropped, not drained.
 * Rejects with undici's error for a transport failure, CallerAborted when `signal` aborts,
 * DeadlineExceeded past the deadline.
 */
export async function exchangeByRequest(
  dispatcher: Dispatcher,
  options: Dispatcher.DispatchOptions,
  limits: ExchangeLimits,
  signal: AbortSignal | undefined,
): Promise<Answer> {
  if (signal?.aborted === true) throw new CallerAborted('aborted', { cause: signal.reason });
  const stop = new AbortController();
  const timer = setTimeout(() => stop.abort(new DeadlineExceeded(limits.deadlineMs)), limits.deadlineMs);
  const onAbort = (): void => stop.abort(new CallerAborted('aborted', { cause: signal?.reason }));
  signal?.addEventListener('abort', onAbort);
  // undici aborts a request still queued for a connection only once it gets one (before writing
  // it): the caller hears of the abort at once, from here.
  const stopped = new Promise<never>((_resolve, reject) => stop.signal.addEventListener('abort', () => reject(stop.signal.reason as Error)));
  const pending = request(dispatcher, { ...options, signal: stop.signal });
  try {
    const response = await Promise.race([pending, stopped]);
    const answer = { status: response.statusCode, headers: response.headers };
    const declared = Number(response.headers['content-length']);
    if (Number.isFinite(declared) && declared > limits.maxBytes) return unread(response, answer);
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of response.body as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > limits.maxBytes) return unread(response, answer);
      chunks.push(chunk);
    }
    return { ...answer, text: Buffer.concat(chunks, size).toString('utf8') };
  } catch (error) {
    pending.then((late) => late.body.destroy(), () => {});
    throw stop.signal.aborted ? (stop.signal.reason as Error) : error;
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener('abort', onAbort);
  }
}

/** Past the bound: the answer is reported unread, and the connection is dropped, not drained. */
function unread(response: Dispatcher.ResponseData, answer: Omit<Answer, 'text'>): Answer {
  response.body.destroy(new Error('answer over the size bound'));
  return { ...answer, text: null };
}
