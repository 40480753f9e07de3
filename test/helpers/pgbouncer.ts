import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { freePort } from './postgres-server.js';

/** Debian's PgBouncer, where installed (apt-get install pgbouncer); .ci/run installs it. */
export const PGBOUNCER = ['/usr/sbin/pgbouncer', '/usr/bin/pgbouncer', '/usr/local/bin/pgbouncer'].find((p) => existsSync(p));

export interface Pooler {
  /** `url` (a database of the server behind it) as reached through the pooler. */
  through(url: string): string;
  stop(): Promise<void>;
}

/**
 * A real PgBouncer in front of the PostgreSQL at `serverUrl`, pooling by `mode`, as Supabase's
 * pooler port or Neon's `-pooler` host does: every database of that server, the same login.
 */
export async function startPgBouncer(serverUrl: string, mode: 'transaction' | 'session', poolSize = 8): Promise<Pooler> {
  if (PGBOUNCER === undefined) throw new Error('pgbouncer is not installed (apt-get install pgbouncer)');
  const server = new URL(serverUrl);
  const home = mkdtempSync(join(tmpdir(), 'enrich-pgbouncer-'));
  chmodSync(home, 0o755);
  const port = await freePort();
  const user = decodeURIComponent(server.username);
  writeFileSync(join(home, 'users.txt'), `"${user}" "${decodeURIComponent(server.password)}"\n`, { mode: 0o600 });
  writeFileSync(
    join(home, 'pgbouncer.ini'),
    [
      '[databases]',
      `* = host=${server.hostname} port=${server.port}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'auth_type = plain',
      `auth_file = ${join(home, 'users.txt')}`,
      `pool_mode = ${mode}`,
      'max_client_conn = 500',
      `default_pool_size = ${poolSize}`,
      'server_reset_query = DISCARD ALL',
      '',
    ].join('\n'),
  );
  // PgBouncer refuses to run as root: as root it runs as the postgres user, as the server does.
  const asRoot = userInfo().uid === 0;
  if (asRoot) {
    const id = (flag: string): number => Number(spawnSync('id', [flag, 'postgres'], { encoding: 'utf8' }).stdout.trim());
    for (const f of ['users.txt', 'pgbouncer.ini']) chownSync(join(home, f), id('-u'), id('-g'));
  }
  const child: ChildProcess = spawn(PGBOUNCER, [...(asRoot ? ['-u', 'postgres'] : []), join(home, 'pgbouncer.ini')], { stdio: ['ignore', 'ignore', 'pipe'] });
  const reap = (): void => void child.kill('SIGKILL');
  process.on('exit', reap);
  await new Promise<void>((resolve, reject) => {
    let log = '';
    child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
      if (log.length < 64_000) log += chunk;
      if (/process up|listening on/.test(log)) resolve();
    });
    child.once('error', reject);
    child.once('exit', (code) => reject(new Error(`pgbouncer exited (${String(code)}) before it was up: ${log.trim().split('\n').slice(-3).join(' ')}`)));
  });
  return {
    through(url) {
      const u = new URL(url);
      u.hostname = '127.0.0.1';
      u.port = String(port);
      return u.toString();
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
        child.kill('SIGTERM');
        await exited;
      }
      process.off('exit', reap);
      rmSync(home, { recursive: true, force: true });
    },
  };
}
