import { describe, expect, it } from 'vitest';
import { libsql } from '../../src/store/sqlite/libsql.js';

describe('loading the SQLite binding', () => {
  it('loads a working binding and leaves process.report as it found it', () => {
    const before = Object.getOwnPropertyDescriptor(process, 'report');
    const Database = libsql();
    const db = new Database(':memory:');
    expect(db.prepare('SELECT 1 + 1').raw(true).get()).toEqual([2]);
    db.close();
    expect(Object.getOwnPropertyDescriptor(process, 'report')).toEqual(before);
    // The real report again, not the stand-in the loader saw.
    const header = (process.report.getReport() as { header: Record<string, unknown> }).header;
    expect(header['glibcVersionRuntime']).not.toBe('present');
    expect(libsql()).toBe(Database);
  });

  // libsql 0.5 stepped on from that earlier read.
  it('reads the right row with get() from a statement read before with all() or iterate()', () => {
    const db = new (libsql())(':memory:');
    db.exec("CREATE TABLE t (k TEXT PRIMARY KEY, v TEXT); INSERT INTO t VALUES ('a', '1'), ('b', '2'), ('c', '3')");
    const point = db.prepare('SELECT k, v FROM t WHERE k = ?').raw(true);
    expect(point.all('a')).toStrictEqual([['a', '1']]);
    expect(point.get('zz')).toBeUndefined();
    point.all('a');
    expect(point.get('b')).toStrictEqual(['b', '2']);
    const from = db.prepare('SELECT k FROM t WHERE k >= ? ORDER BY k').raw(true);
    const rows = from.iterate('a');
    rows.next();
    expect(from.get('c')).toStrictEqual(['c']);
    expect(from.pluck().get('b')).toBe('b');
    db.close();
  });
});
