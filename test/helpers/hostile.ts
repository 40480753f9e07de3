import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createTcpServer, type Server as TcpServer, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';

/**
 * Servers on 127.0.0.1, port 0, that misbehave on purpose: the parts the sandbox cannot play
 * (a dripped body, a 100 MB answer, a reset, a wrong protocol, a broken 200).
 */
export interface Hostile {
  url: string;
  /** Requests seen so far. */
  readonly requests: number;
  close(): Promise<void>;
}

type Handler = (req: IncomingMessage, res: ServerResponse, n: number, body: string) => void;

async function listen(server: Server | TcpServer): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
}

/** An HTTP server whose handler scripts each answer; `n` counts requests from 1. */
export async function hostileServer(handler: Handler): Promise<Hostile> {
  let requests = 0;
  const sockets = new Set<Socket>();
  const server = createServer((req, res) => {
    requests++;
    const n = requests;
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => handler(req, res, n, Buffer.concat(chunks).toString('utf8')));
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  const port = await listen(server);
  return {
    url: `http://127.0.0.1:${port}`,
    get requests() {
      return requests;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** A TCP server that hands each connection to `onSocket` and speaks no protocol of its own. */
export async function rawServer(onSocket: (socket: Socket) => void): Promise<{ port: number; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const server = createTcpServer((s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
    s.on('error', () => {});
    onSocket(s);
  });
  const port = await listen(server);
  return {
    port,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** A port nothing listens on: taken from the OS, then given back. */
export async function closedPort(): Promise<number> {
  const server = createTcpServer();
  const port = await listen(server);
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

export const json = (res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void => {
  res.writeHead(status, { 'content-type': status >= 400 ? 'application/problem+json' : 'application/json', ...headers });
  res.end(JSON.stringify(body));
};

/** A service that matches every domain to `record`'s company and sells `record` for a credit (10 left). */
export function recordServer<R extends { domain: string; name: string }>(record: R): Promise<Hostile> {
  return hostileServer((req, res) =>
    req.method === 'GET'
      ? json(res, 200, { matched: true, credits_charged: 0, company: { domain: record.domain, name: record.name } })
      : json(res, 200, { matched: true, credits_charged: 1, credits_remaining: 10, company: record }),
  );
}
