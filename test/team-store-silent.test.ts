import { connect as connectTcp, createServer, type AddressInfo, type Socket } from 'node:net';
import { describe, expect, it } from 'vitest';
import type { EnrichError } from '../src/errors.js';
import { client } from '../src/store/postgres/connect.js';
import { PgStore } from '../src/store/postgres/store.js';
import type { StoreEvent } from '../src/store/types.js';
import { freshDatabase, sql } from './helpers/postgres.js';

/**
 * Found by an adversarial review and fixed: the team store's connections have no read deadline (no
 * query_timeout, no TCP keepalive: connect.ts client()), so a network that goes silent (a NAT or
 * VPN that drops the flow, a cable, a suspended host) rather than resetting the connection is
 * never seen as lost: the claim waits, and with it the paid call, far past RECONNECT_MS
 * (~15 min of TCP retransmission on Linux; forever here, where the proxy acknowledges).
 */
const info = { inputName: 'in.csv', inputSha256: 'x', rows: 1, dryRun: false, options: {} };
const intent = (c: string): StoreEvent => ({ type: 'intent', company: c, generation: 1, keyVersion: 1, key: `k-${c}`, at: Date.now() });

/** A TCP proxy to PostgreSQL that a test can make silent: bytes are taken and never passed on, nothing is closed. */
async function silentProxy(target: URL): Promise<{ url: string; silence(): void; close(): void }> {
  const sockets = new Set<Socket>();
  let silent = false;
  const server = createServer((inbound) => {
    const outbound = connectTcp(Number(target.port), target.hostname);
    for (const s of [inbound, outbound]) {
      sockets.add(s);
      s.on('error', () => {});
    }
    inbound.on('data', (d) => void (silent ? undefined : outbound.write(d)));
    outbound.on('data', (d) => void (silent ? undefined : inbound.write(d)));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = new URL(target);
  url.port = String((server.address() as AddressInfo).port);
  return {
    url: url.toString(),
    silence: () => void (silent = true),
    close: () => {
      server.close();
      for (const s of sockets) s.destroy();
    },
  };
}

describe('a team store whose network goes silent', () => {
  it('a claim fails as unavailable within the reconnect budget, instead of waiting forever', async () => {
    const proxy = await silentProxy(new URL(await freshDatabase()));
    const store = await PgStore.open(proxy.url, { tool: 'test', reconnectMs: 300, queryTimeoutMs: 1_000 });
    try {
      const run = await store.beginRun('svc', info);
      expect(await run.append(intent('acme.com'), true)).toStrictEqual({ kind: 'ok' });
      proxy.silence();
      const claim = run.append(intent('bolt.com'), true).then(
        () => 'claimed',
        (e: unknown) => `failed: ${(e as Error).message}`,
      );
      // The budget is 0.3 s; give it 10 s.
      const outcome = await Promise.race([claim, new Promise((resolve) => setTimeout(() => resolve('still waiting after 10 s'), 10_000))]);
      expect(outcome).toMatch(/^failed: no answer from the team store at 127\.0\.0\.1:\d+ in 1 s, nor again within 0\.3 s: /);
    } finally {
      proxy.close();
      void store.close().catch(() => {});
    }
  });
});

describe('a team store connection lost while idle (PostgreSQL restarting)', () => {
  // Found under load, as a store opened.
  it('does not end the process: every client has an error listener from the start', async () => {
    const url = await freshDatabase();
    const c = client(url);
    await c.connect();
    const ended = new Promise((resolve) => c.once('end', resolve));
    await sql(url, 'SELECT pg_terminate_backend($1)', [(c as unknown as { processID: number }).processID]);
    await ended;
    await expect(c.query('SELECT 1')).rejects.toThrow();
  });
});

describe('a team store lost as it is being opened (PostgreSQL restarting)', () => {
  it('is out of reach for now (unavailable: exit 6, rerun later), not a failure (exit 1)', async () => {
    const target = new URL(await freshDatabase());
    // Cuts the connection as the store's first look at its schema goes out.
    const server = createServer((inbound) => {
      const outbound = connectTcp(Number(target.port), target.hostname);
      for (const sock of [inbound, outbound]) sock.on('error', () => {});
      inbound.on('data', (d: Buffer) => {
        if (d.includes('schema_version')) {
          inbound.destroy();
          outbound.destroy();
        } else outbound.write(d);
      });
      outbound.on('data', (d) => void inbound.write(d));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = new URL(target);
    url.port = String((server.address() as AddressInfo).port);
    try {
      const error = await PgStore.open(url.toString(), { tool: 'test' }).then(
        () => null,
        (e: unknown) => e as EnrichError,
      );
      expect(error).toMatchObject({ kind: 'unavailable' });
      expect(error?.message).toMatch(/^lost the team store at 127\.0\.0\.1:\d+ as it was being opened \(.+\); nothing was sent to the service, run the same command once it is back$/);
    } finally {
      server.close();
    }
  });
});
