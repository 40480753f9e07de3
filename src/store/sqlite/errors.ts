import { causeChain, EnrichError, errorMessage } from '../../errors.js';

/** The primary result codes libsql reports only by number, when a connection cannot be opened. */
const CODE_NAMES: Record<number, string> = { 3: 'SQLITE_PERM', 8: 'SQLITE_READONLY', 11: 'SQLITE_CORRUPT', 13: 'SQLITE_FULL', 14: 'SQLITE_CANTOPEN', 26: 'SQLITE_NOTADB' };

/**
 * SQLite's result code for an error ('SQLITE_CORRUPT', ...), or ''. A statement's error carries
 * it as `code`; libsql's failure to open a connection has only a message ending in the number.
 */
export function sqliteCode(error: unknown): string {
  const code = (error as { code?: unknown } | null | undefined)?.code;
  if (typeof code === 'string' && code !== '') return code;
  const m = /ConnectionFailed\(.*: (\d+)"\)/.exec(errorMessage(error));
  if (m === null) return '';
  const n = Number(m[1]);
  return CODE_NAMES[n & 0xff] ?? `SQLITE_${n}`;
}

export function describeSqliteError(error: unknown): string {
  const code = sqliteCode(error);
  if (/FULL/.test(code)) return 'the disk is full';
  if (/READONLY|PERM|CANTOPEN/.test(code)) return 'permission denied or read-only';
  if (/CORRUPT|NOTADB/.test(code)) return 'the file is damaged or not an enrich store';
  if (/BUSY|LOCKED/.test(code)) return 'another process holds it locked for too long';
  return code !== '' ? code : errorMessage(error);
}

/** Whether SQLite found the file's pages damaged (or, mid-run, no longer a database at all). */
export const isDamage = (error: unknown): boolean => /^SQLITE_(CORRUPT|NOTADB)/.test(sqliteCode(error));

/**
 * SQLite found the store damaged. Rerunning cannot mend it and a new store would buy everything
 * again, so the user is told so, with what to do. Found before anything was sent it is exit 2,
 * like any store that cannot be used; found by a run at work it is exit 1 (README "Exit codes").
 */
export class StoreDamagedError extends EnrichError {
  override readonly name = 'StoreDamagedError';
  constructor(path: string, duringRun: boolean, cause: unknown) {
    const sent = duringRun ? 'the run stopped, and what it bought since it began may not be recorded' : 'nothing was sent';
    super(
      `the store ${path} is damaged (SQLite: ${errorMessage(cause)}); ${sent}. Move it aside and restore it from a backup (\`enrich doctor --store <path>\` checks one); a new store there would buy again everything this one held`,
      duringRun ? 'failure' : 'usage',
      { cause },
    );
  }
}

/**
 * `error` as the user should read it: a damaged store said as such, where SQLite's error reached
 * this far unexplained, or inside a failed write to the store. Other explained errors are kept.
 */
export function explainDamage(error: unknown, path: string, duringRun: boolean): unknown {
  if (error instanceof EnrichError && error.name !== 'StoreWriteError') return error;
  for (const e of causeChain(error)) {
    if (isDamage(e)) return new StoreDamagedError(path, duringRun, e);
  }
  return error;
}
