import type { Dispatcher } from 'undici';
import { monotonicMs } from '../pipeline/clock.js';
import { DeadlineExceeded } from './network.js';

/** What came back for one request: the status, the headers, and the body as text (null: over the bound, not read). */
export interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string | null;
}

export interface ExchangeLimits {
  /** The whole request, headers and all of the body, within this many ms. */
  deadlineMs: number;
  /** The most bytes of a body read; past them the answer's text is null and the rest is never read. */
  maxBytes: number;
}

/** The caller gave up (Ctrl-C, a stopped run): told apart from our deadline when classified. */
export class CallerAborted extends Error {
  override readonly name = 'AbortError';
}

/**
 * One request over undici's dispatch API, gathering the body from the parser's callbacks without the stream, async resource and timer
 * `request()` adds: it runs for every answer. The deadline: headersTimeout bounds the headers; a body not complete in their packet gets
 * a timer, armed on the next tick, for what is left, so a body dripped a byte at a time still ends.
 */
class Exchange implements Dispatcher.DispatchHandler {
  private controller: Dispatcher.DispatchController | null = null;
  private chunks: Buffer[] = [];
  private size = 0;
  private status = 0;
  private headers: Answer['headers'] = {};
  private settled = false;
  private timer: NodeJS.Timeout | undefined = undefined;
  /** Why this side ended the request (the caller's abort, the deadline), if it did. */
  private stopped: Error | null = null;
  /** Its place among the exchanges open under its signal (watch, below); null once settled. */
  watched: Watched | null = null;
  prev: Exchange | null = null;
  next: Exchange | null = null;

  constructor(
    private readonly limits: ExchangeLimits,
    private readonly startedAt: number,
    private readonly signal: AbortSignal | undefined,
    private readonly resolve: (answer: Answer) => void,
    private readonly reject: (error: unknown) => void,
  ) {
    if (signal !== undefined) watch(signal, this);
  }

  /** The caller's signal aborted. */
  handleEvent(): void {
    this.stop(new CallerAborted('aborted', { cause: this.signal?.reason }));
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller;
    // Aborted while it waited for a connection: it never goes out.
    if (this.stopped !== null) controller.abort(this.stopped);
  }

  onResponseStart(_controller: Dispatcher.DispatchController, statusCode: number, headers: Answer['headers']): void {
    if (statusCode < 200) return; // 1xx: informational, the answer follows
    this.status = statusCode;
    this.headers = headers;
    const declared = Number(headers['content-length']);
    if (Number.isFinite(declared) && declared > this.limits.maxBytes) {
      this.overBound();
      return;
    }
    process.nextTick(armDeadline, this);
  }

  onResponseData(_controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.settled) return;
    this.size += chunk.length;
    if (this.size > this.limits.maxBytes) this.overBound();
    else this.chunks.push(chunk);
  }

  onResponseEnd(): void {
    if (this.settled) return;
    const text = this.chunks.length === 1 ? (this.chunks[0] as Buffer).toString('utf8') : Buffer.concat(this.chunks, this.size).toString('utf8');
    this.settle();
    this.resolve({ status: this.status, headers: this.headers, text });
  }

  onResponseError(_controller: Dispatcher.DispatchController, error: Error): void {
    if (this.settled) return;
    this.settle();
    this.reject(this.stopped ?? error);
  }

  /** Arms the deadline for a body still coming in after the tick that brought its headers. */
  arm(): void {
    if (this.settled || this.timer !== undefined) return;
    const left = this.limits.deadlineMs - (monotonicMs() - this.startedAt);
    this.timer = setTimeout(() => this.stop(new DeadlineExceeded(this.limits.deadlineMs)), Math.max(0, left));
  }

  /** Ends the request from this side; it settles as a failure with `reason`. */
  private stop(reason: Error): void {
    if (this.settled || this.stopped !== null) return;
    this.stopped = reason;
    if (this.controller !== null) this.controller.abort(reason);
    else {
      // Still queued for a connection: settle now; it is aborted before it is written.
      this.settle();
      this.reject(reason);
    }
  }

  /** Past the bound: the answer is reported unread, and the connection is dropped, not drained. */
  private overBound(): void {
    this.settle();
    this.chunks = [];
    this.resolve({ status: this.status, headers: this.headers, text: null });
    this.controller?.abort(new Error('answer over the size bound'));
  }

  private settle(): void {
    this.settled = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    unwatch(this);
  }
}

/**
 * The exchanges open under one signal, and its one listener (a listener per request cost the event loop; all of a run's share one signal).
 * They form a list linked through themselves, and a settled one is unlinked with its links cleared: V8's young-generation collector keeps
 * alive whatever an old object points to, so stale links (a removed EventTarget listener, an outgrown Set table) promoted later requests' objects.
 */
interface Watched {
  head: Exchange | null;
}
const underSignal = new WeakMap<AbortSignal, Watched>();

function watch(signal: AbortSignal, exchange: Exchange): void {
  let watched = underSignal.get(signal);
  if (watched === undefined) {
    const fresh: Watched = { head: null };
    signal.addEventListener('abort', () => {
      const open: Exchange[] = [];
      for (let e = fresh.head; e !== null; e = e.next) open.push(e);
      for (const e of open) e.handleEvent();
    }, { once: true });
    underSignal.set(signal, fresh);
    watched = fresh;
  }
  exchange.watched = watched;
  exchange.next = watched.head;
  if (watched.head !== null) watched.head.prev = exchange;
  watched.head = exchange;
}

function unwatch(exchange: Exchange): void {
  const watched = exchange.watched;
  if (watched === null) return;
  if (exchange.prev !== null) exchange.prev.next = exchange.next;
  else watched.head = exchange.next;
  if (exchange.next !== null) exchange.next.prev = exchange.prev;
  exchange.watched = null;
  exchange.prev = null;
  exchange.next = null;
}

function armDeadline(exchange: Exchange): void {
  exchange.arm();
}

/** Sends one request and gathers its answer; rejects with undici's error on a transport failure, CallerAborted on `signal`, DeadlineExceeded past the deadline. */
export function exchange(
  dispatcher: Dispatcher,
  options: Dispatcher.DispatchOptions,
  limits: ExchangeLimits,
  signal: AbortSignal | undefined,
): Promise<Answer> {
  const startedAt = monotonicMs();
  return new Promise<Answer>((resolve, reject) => {
    if (signal?.aborted === true) {
      reject(new CallerAborted('aborted', { cause: signal.reason }));
      return;
    }
    dispatcher.dispatch(options, new Exchange(limits, startedAt, signal, resolve, reject));
  });
}
