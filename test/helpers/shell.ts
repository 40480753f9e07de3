import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The clone this suite runs from. */
export const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export interface Shell {
  child: ReturnType<typeof spawn>;
  done: Promise<{ code: number; out: string; err: string }>;
}

/** A script in /bin/sh through env -i: nothing of this process's environment leaks in; stdin is not a terminal. */
export function sh(script: string, cwd: string, env: Record<string, string>): Shell {
  const child = spawn('/usr/bin/env', ['-i', ...Object.entries(env).map(([k, v]) => `${k}=${v}`), '/bin/sh', '-c', script], { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout?.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr?.on('data', (c: Buffer) => (err += c.toString()));
  return { child, done: new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code: code ?? (signal === null ? -1 : 128), out, err }))) };
}

/**
 * A reader's machine under `root`: a working folder, a home, and `enrich` on the PATH as
 * `npm install -g .` would put it; PostgreSQL's createdb and sqlite3, where this machine lacks
 * the clients, as the same statements through the project's own drivers.
 */
export function workspace(root: string): { work: string; home: string; path: string } {
  const work = join(root, 'work');
  const home = join(root, 'home');
  const bin = join(root, 'bin');
  for (const d of [work, home, bin]) mkdirSync(d, { recursive: true });
  writeFileSync(join(bin, 'enrich'), `#!/bin/sh\nexec "${process.execPath}" "${join(ROOT, 'bin/enrich.cjs')}" "$@"\n`, { mode: 0o755 });
  if (!existsSync('/usr/bin/createdb')) {
    const create = `const pg = require(${JSON.stringify(join(ROOT, 'node_modules/pg'))}); const c = new pg.Client(); c.connect().then(() => c.query('CREATE DATABASE "' + process.argv[1] + '"')).then(() => c.end(), (e) => { console.error(e.message); process.exit(1); });`;
    writeFileSync(join(bin, 'createdb'), `#!/bin/sh\nexec "${process.execPath}" -e '${create}' "$@"\n`, { mode: 0o755 });
  }
  if (!existsSync('/usr/bin/sqlite3')) {
    const query = `const D = require(${JSON.stringify(join(ROOT, 'node_modules/libsql'))}); const db = new D(process.argv[1], { readonly: true }); for (const r of db.prepare(process.argv[2]).raw(true).all()) console.log(r.join('|'));`;
    writeFileSync(join(bin, 'sqlite3'), `#!/bin/sh\nexec "${process.execPath}" -e "$(cat <<'JS'\n${query}\nJS\n)" "$@"\n`, { mode: 0o755 });
  }
  return { work, home, path: `${bin}:${dirname(process.execPath)}:/usr/bin:/bin` };
}
