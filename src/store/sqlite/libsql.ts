import { createRequire } from 'node:module';
import type Database from 'libsql';

let loaded: typeof Database | undefined;

/**
 * libsql's Database class, loaded on first use (by require: an ES `import` of a CommonJS module
 * first scans its whole source for export names). Its loader gathers a diagnostic report to tell
 * glibc from musl; a swap that answered it from detect-libc instead measured 1.02-1.03x on a rerun
 * with nothing to do, under the 10% a speed mechanism must pay for itself (issue 20), and went.
 */
export function libsql(): typeof Database {
  if (loaded !== undefined) return loaded;
  const require = createRequire(import.meta.url);
  const database = require('libsql') as typeof Database;
  firstRowByAll(database);
  loaded = database;
  return loaded;
}

interface RowStatement {
  get(...params: unknown[]): unknown;
  all(...params: unknown[]): unknown[];
}

/**
 * libsql 0.5's `Statement.get()` steps the statement without resetting it: once the statement
 * has been read with `all()` or `iterate()`, `get()` answers with a row of that earlier read (a
 * miss comes back as the last company looked up, a hit as the wrong one). The store caches its
 * statements and reads one lookup both ways, so `get()` here is the first row of `all()`, which
 * starts afresh every time. Every `get()` in the store reads one row, so this costs nothing.
 */
function firstRowByAll(database: typeof Database): void {
  const db = new database(':memory:');
  try {
    const proto = Object.getPrototypeOf(db.prepare('SELECT 1')) as RowStatement;
    proto.get = function get(this: RowStatement, ...params: unknown[]): unknown {
      return this.all(...params)[0];
    };
  } finally {
    db.close();
  }
}
