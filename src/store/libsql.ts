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
  try {
    loaded = require('libsql') as typeof Database;
  } finally {
    if (swap) Object.defineProperty(process, 'report', report);
  }
  return loaded;
}
