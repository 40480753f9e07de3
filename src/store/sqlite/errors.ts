import { causeChain, EnrichError, errorMessage } from '../../errors.js';

/** The primary result codes libsql reports only by number, when a connection cannot be opened. */
const CODE_NAMES: Record<number, string> = { 3: 'SQLITE_PERM', 8: 'SQLITE_READONLY', 11: 'SQLITE_CORRUPT', 13: 'SQLITE_FULL', 14: 'SQLITE_CANTOPEN', 26: 'SQLITE_NOTADB' };

/** SQLite's result code ('SQLITE_CORRUPT', ...) or '': a statement's error has it as `code`; libsql's failed open only as a number in its message. */
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

/** SQLite found the store damaged: a rerun cannot mend it and a new store would buy everything again. Exit 2 before anything was sent, 1 mid-run. */
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

/** `error` as the user should read it: SQLite damage, unexplained or inside a failed store write, said as such; other explained errors kept. */
export function explainDamage(error: unknown, path: string, duringRun: boolean): unknown {
  if (error instanceof EnrichError && error.name !== 'StoreWriteError') return error;
  for (const e of causeChain(error)) {
    if (isDamage(e)) return new StoreDamagedError(path, duringRun, e);
  }
  return error;
}
