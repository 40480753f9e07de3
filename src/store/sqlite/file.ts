import { accessSync, closeSync, constants, copyFileSync, linkSync, openSync, rmSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import type Database from 'libsql';
import { landsAt, lstatOrNull, statOrNull } from '../../io/paths.js';
import { libsql } from './libsql.js';
import { LATE_INDEXES, SCHEMA, SCHEMA_VERSION } from './schema.js';
import { sqliteCode } from './errors.js';

type Db = InstanceType<typeof Database>;

/** Whether a connection may write (a batch, prune, release, import) or only read (ledger, doctor). */
export type StoreAccess = 'read' | 'write';

/** SQLite's name for `path`: a `file:` URI of the absolute path (never read as :memory:); mode=rw/ro never create a file (only createStoreFile does, complete and 0600). */
export function sqliteUri(path: string, query: string): string {
  const escaped = resolve(path).replace(/[%?#]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
  return `file:${escaped}?${query}`;
}

/**
 * Makes a new store complete before any process can see it: built under a private name and hard-linked into place, which never
 * replaces a store (a second creator gets EEXIST and uses the first's). Only the new file is opened here: closing any descriptor
 * of the store would drop the POSIX locks this process's SQLite holds on it.
 */
export function createStoreFile(path: string, now: number): void {
  // A link to a store not made yet: the store is made at the link's target.
  const target = lstatOrNull(path)?.isSymbolicLink() === true ? landsAt(path) : path;
  const suffix = Buffer.from(globalThis.crypto.getRandomValues(new Uint8Array(6))).toString('hex');
  const temp = join(dirname(target), `.${basename(target)}.enrich-new-${process.pid}-${suffix}`);
  // 0600 from the start: SQLite would use the umask, and the -wal and -shm copy the file's mode.
  closeSync(openSync(temp, 'wx', 0o600));
  try {
    buildStore(temp, now);
    publish(temp, target);
  } finally {
    for (const extra of ['', '-journal', '-wal', '-shm']) rmSync(`${temp}${extra}`, { force: true });
  }
}

function buildStore(temp: string, now: number): void {
  // Web Crypto's global: node:crypto loads only when a store is created, not on every open.
  const id = Buffer.from(globalThis.crypto.getRandomValues(new Uint8Array(8))).toString('hex');
  const db = new (libsql())(sqliteUri(temp, 'mode=rw'));
  try {
    // exec() only: a prepared statement would keep libsql's connection open past close(). One rollback-journal
    // transaction, so the file is complete when closed; WAL is set last, for every later connection.
    db.exec(`BEGIN; ${SCHEMA} ${LATE_INDEXES}
      INSERT INTO meta (key, value) VALUES ('store_id', '${id}'), ('created_at', '${Math.trunc(now)}');
      PRAGMA user_version = ${SCHEMA_VERSION};
      COMMIT;
      PRAGMA journal_mode = WAL;`);
  } finally {
    db.close();
  }
}

/** File systems that cannot hard-link (FAT, some FUSE and SMB mounts) answer with one of these. */
const NO_LINKS = new Set(['EPERM', 'ENOTSUP', 'EOPNOTSUPP', 'ENOSYS']);

function publish(temp: string, target: string): void {
  try {
    linkSync(temp, target);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? '';
    if (code === 'EEXIST') return; // another run made it first: that one is the store
    if (!NO_LINKS.has(code)) throw error;
    // An exclusive copy never replaces a store either; a run opening it mid-copy would refuse it as incomplete, not start afresh.
    try {
      copyFileSync(temp, target, constants.COPYFILE_EXCL);
    } catch (copyError) {
      if ((copyError as NodeJS.ErrnoException).code !== 'EEXIST') throw copyError;
    }
  }
}

/** A connection to the store at `path`, which exists. */
export function connectStore(path: string, access: StoreAccess): Db {
  const Database = libsql();
  if (access === 'write') return new Database(sqliteUri(path, 'mode=rw'));
  const db = new Database(sqliteUri(path, 'mode=ro'));
  try {
    // Opening is lazy: the first read finds whether SQLite can set up its WAL index (-shm).
    db.exec('SELECT count(*) FROM sqlite_master');
    return db;
  } catch (error) {
    db.close();
    if (!readableAsIs(path, error)) throw error;
    return new Database(sqliteUri(path, 'mode=ro&immutable=1'));
  }
}

/**
 * A cleanly closed store on a read-only mount has no -wal or -shm, and SQLite cannot create the -shm a WAL reader needs; nothing
 * can change it there, so it is read as immutable. Only on a read-only file system: elsewhere a writer may come, which immutable ignores.
 */
function readableAsIs(path: string, error: unknown): boolean {
  if (!/^SQLITE_(CANTOPEN|READONLY)/.test(sqliteCode(error))) return false;
  const real = landsAt(path);
  if (statOrNull(`${real}-wal`) !== null) return false;
  try {
    accessSync(dirname(real), constants.W_OK);
    return false;
  } catch (accessError) {
    return (accessError as NodeJS.ErrnoException).code === 'EROFS';
  }
}
