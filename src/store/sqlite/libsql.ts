import { createRequire } from 'node:module';
import { familySync, GLIBC } from 'detect-libc';
import type Database from 'libsql';

let loaded: typeof Database | undefined;

/**
 * libsql's Database class, loaded on first use, at about half of what a plain `import` costs
 * (the store is on the path of every run, and a run with nothing to do is mostly start-up):
 *
 * - by require: an ES `import` of a CommonJS module first scans its whole source for export names;
 * - without a diagnostic report: libsql's loader (@neon-rs/load) picks the glibc or musl build of
 *   its native addon by asking `process.report.getReport()` whether glibc is present, which
 *   gathers a full diagnostic report (about 5 ms, every start). detect-libc answers the same
 *   question from the running node's ELF interpreter (one 2 KB read), so while libsql loads, and
 *   only when that answer is glibc, the report seen is just the field the loader reads. Anything
 *   else (musl, another OS, a report property we cannot swap) loads libsql untouched.
 */
export function libsql(): typeof Database {
  if (loaded !== undefined) return loaded;
  const require = createRequire(import.meta.url);
  const report = Object.getOwnPropertyDescriptor(process, 'report');
  const swap = process.platform === 'linux' && report?.configurable === true && familySync() === GLIBC;
  if (swap) {
    // The loaders test only that the field is there (and truthy); its value is never read.
    const header = { glibcVersionRuntime: 'present' };
    Object.defineProperty(process, 'report', { configurable: true, enumerable: true, value: { excludeNetwork: true, getReport: () => ({ header }) } });
  }
  let database: typeof Database;
  try {
    database = require('libsql') as typeof Database;
  } finally {
    if (swap) Object.defineProperty(process, 'report', report);
  }
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
