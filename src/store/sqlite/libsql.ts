import { createRequire } from 'node:module';
import type Database from 'libsql';

let loaded: typeof Database | undefined;

/** libsql's Database, loaded on first use by require (an ES import of CommonJS first scans its whole source for export names). */
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
 * libsql 0.5's `Statement.get()` does not reset the statement: after `all()`/`iterate()` it answers a row of that earlier read.
 * The store caches statements, so `get()` here is the first row of `all()`; every `get()` reads one row, so it costs nothing.
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
