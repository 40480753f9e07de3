import { createHash } from 'node:crypto';
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { watchInput } from '../../src/io/input-identity.js';
import type { InputSource } from '../../src/io/input.js';

const sha = (text: string): string => createHash('sha256').update(text).digest('hex');
const fileInput = (path: string): InputSource => ({ path, displayName: path, fromStdin: false, bytes: 0, cleanup: async () => {} });
/** A clock an hour ahead: every file written by the test is "old", past the racy window. */
const later = (): number => Date.now() + 3600_000;

// Issue 19, item 15.
describe('watching the input through a run', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'enrich-watch-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));
  const changed = /^in\.csv changed during the run \(rewritten or replaced\); its results were stopped/;

  it('sees a rewrite in place of the same size, a replacement and a removal by stat alone', () => {
    const path = join(dir, 'in.csv');
    for (const change of [() => writeFileSync(path, 'domain\nbeta.io\n'), () => (writeFileSync(`${path}.new`, 'domain\nacme.io\n'), renameSync(`${path}.new`, path)), () => rmSync(path)]) {
      writeFileSync(path, 'domain\nacme.io\n');
      const watch = watchInput({ ...fileInput(path), displayName: 'in.csv' }, later);
      expect(() => watch.check()).not.toThrow();
      change();
      expect(() => watch.check()).toThrow(changed);
    }
  });

  it('hashes again only a file stat cannot vouch for: one written within two seconds of the run', async () => {
    const path = join(dir, 'in.csv');
    writeFileSync(path, 'domain\nacme.io\n');
    const wrong = 'f'.repeat(64);
    // Past the racy window, stat is trusted: not read again (a wrong sha256 goes unnoticed).
    await expect(watchInput(fileInput(path), later).verify(wrong)).resolves.toBeUndefined();
    await expect(watchInput({ ...fileInput(path), displayName: 'in.csv' }).verify(wrong)).rejects.toThrow(changed);
    await expect(watchInput(fileInput(path)).verify(sha('domain\nacme.io\n'))).resolves.toBeUndefined();
  });

  it("has nothing to watch in a spool, the run's own private file", async () => {
    const watch = watchInput({ ...fileInput(join(dir, 'gone.csv')), fromStdin: true });
    expect(() => watch.check()).not.toThrow();
    await expect(watch.verify('0'.repeat(64))).resolves.toBeUndefined();
  });
});
