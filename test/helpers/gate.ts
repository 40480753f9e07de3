import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A proxy in front of a sandbox that lets through only as many requests as the test allows and
 * holds the rest: a run can be stopped at a chosen point of progress, whatever the machine's speed.
 */
export interface Gate {
  url: string;
  /** Requests forwarded so far. */
  readonly passed: number;
  /** Lets `n` more requests through (held ones first). */
  allow(n: number): void;
  /** Lets everything through from now on. */
  open(): void;
  close(): Promise<void>;
}

/**
 * `free`: requests that pass whatever the budget (e.g. the paid calls, to let them catch up).
 * `over`: what a request beyond the budget gets: held until allowed, or a 429 (which frees the
 * client's slot for the free requests, where a held one would keep it).
 */
export async function startGate(target: string, allowed: number, free: (path: string) => boolean = () => false, over: 'hold' | 'refuse' = 'hold'): Promise<Gate> {
  const held: (() => void)[] = [];
  let budget = allowed;
  let passed = 0;
  const forward = (req: IncomingMessage, res: ServerResponse): void => {
    passed++;
    const upstream = request(new URL(req.url ?? '/', target), { method: req.method, headers: req.headers }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    });
    upstream.on('error', () => res.destroy());
    req.pipe(upstream);
  };
  const drain = (): void => {
    while (held.length > 0 && budget > 0) {
      budget--;
      (held.shift() as () => void)();
    }
  };
  const server: Server = createServer((req, res) => {
    if (free(req.url ?? '')) {
      forward(req, res);
      return;
    }
    if (over === 'refuse' && budget <= 0) {
      res.writeHead(429, { 'content-type': 'application/problem+json', 'retry-after': '1' });
      res.end(JSON.stringify({ type: 'about:blank', title: 'Too many requests', status: 429, code: 'rate_limited', retryAfterSeconds: 1 }));
      return;
    }
    held.push(() => forward(req, res));
    drain();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    get passed() {
      return passed;
    },
    allow(n) {
      budget += n;
      drain();
    },
    open() {
      budget = Number.POSITIVE_INFINITY;
      drain();
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
