import { join } from 'node:path';
import { afterEach, beforeEach } from 'vitest';
import { Store, type OpenStoreOptions } from '../../src/store/sqlite/store.js';
import { tempDir } from './cli.js';

/**
 * SQLite stores in a temp folder of each test's own, every one opened closed after the test:
 * `open()` is the folder's store.db, `open(path)` another file (several connections to one file
 * play several processes).
 */
export function useStoreFiles(): { readonly dir: ReturnType<typeof tempDir>; open(path?: string, options?: Partial<OpenStoreOptions>): Store } {
  let dir: ReturnType<typeof tempDir> | undefined;
  let stores: Store[] = [];
  beforeEach(() => {
    dir = tempDir();
  });
  afterEach(() => {
    for (const s of stores) s.close();
    stores = [];
    dir?.cleanup();
  });
  const folder = (): ReturnType<typeof tempDir> => {
    if (dir === undefined) throw new Error('useStoreFiles: no test is running');
    return dir;
  };
  return {
    get dir() {
      return folder();
    },
    open(path = join(folder().path, 'store.db'), options = {}) {
      const s = Store.open(path, { tool: 'test', ...options });
      stores.push(s);
      return s;
    },
  };
}
