import { describe, expect, it } from 'vitest';
import { libsql } from '../../src/store/libsql.js';

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
});
