import { createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { inputSha256, watchInput } from '../../src/io/input-identity.js';
import type { InputSource } from '../../src/io/input.js';

const sha = (text: string): string => createHash('sha256').update(text).digest('hex');
const fileInput = (path: string): InputSource => ({ path, displayName: path, fromStdin: false, bytes: 0, cleanup: async () => {} });
/** A clock an hour ahead: every file written by the test is "old", past the racy window. */
const later = (): number => Date.now() + 3600_000;
const entries = (path: string): string[] => {
  try {
    return readdirSync(path);
  } catch {
    return [];
  }
};

describe("the input's sha256, remembered by file identity", () => {
  let dir: string;
  let memo: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'enrich-identity-'));
    memo = join(dir, 'scans');
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('hashes once, then reuses the hash while the file is unchanged', async () => {
    const path = join(dir, 'in.csv');
    writeFileSync(path, 'domain\nacme.com\n');
    expect(await inputSha256(fileInput(path), memo, later)).toBe(sha('domain\nacme.com\n'));
    const [name] = readdirSync(memo);
    expect(name).toMatch(/^in\.csv-[0-9a-f]{8}\.input$/);
    // Proof the second answer comes from the memo and not from the bytes: plant a different hash
    // there; an unchanged file gets the planted one back.
    const file = join(memo, name as string);
    const planted = 'f'.repeat(64);
    writeFileSync(file, readFileSync(file, 'utf8').replace(/"sha256":"[0-9a-f]+"/, `"sha256":"${planted}"`));
    expect(await inputSha256(fileInput(path), memo, later)).toBe(planted);
  });

  it('hashes again after any write, even one that keeps the size and sets the old times back', async () => {
    const path = join(dir, 'in.csv');
    writeFileSync(path, 'domain\nacme.com\n');
    await inputSha256(fileInput(path), memo, later);
    const old = new Date(Date.now() - 86_400_000);
    utimesSync(path, old, old);
    await inputSha256(fileInput(path), memo, later);
    // Same size, same (restored) modification time: only the change time tells.
    writeFileSync(path, 'domain\nacme.org\n');
    utimesSync(path, old, old);
    expect(await inputSha256(fileInput(path), memo, later)).toBe(sha('domain\nacme.org\n'));
  });

  it('hashes again when the file is replaced by another (a new inode)', async () => {
    const path = join(dir, 'in.csv');
    writeFileSync(path, 'domain\nacme.com\n');
    await inputSha256(fileInput(path), memo, later);
    writeFileSync(join(dir, 'next.csv'), 'domain\nbeta.io\n');
    renameSync(join(dir, 'next.csv'), path);
    expect(await inputSha256(fileInput(path), memo, later)).toBe(sha('domain\nbeta.io\n'));
  });

  it('remembers nothing for a file written within the last two seconds (it could change again unseen)', async () => {
    const path = join(dir, 'in.csv');
    writeFileSync(path, 'domain\nacme.com\n');
    expect(await inputSha256(fileInput(path), memo)).toBe(sha('domain\nacme.com\n'));
    expect(entries(memo)).toEqual([]);
  });

  it('treats a damaged memo as absent, and never remembers stdin', async () => {
    const path = join(dir, 'in.csv');
    writeFileSync(path, 'domain\nacme.com\n');
    await inputSha256(fileInput(path), memo, later);
    const [name] = readdirSync(memo);
    writeFileSync(join(memo, name as string), '{"path":');
    expect(await inputSha256(fileInput(path), memo, later)).toBe(sha('domain\nacme.com\n'));

    const spooled = join(dir, 'spool.csv');
    writeFileSync(spooled, 'domain\nbeta.io\n');
    expect(await inputSha256({ ...fileInput(spooled), fromStdin: true }, join(dir, 'other'), later)).toBe(sha('domain\nbeta.io\n'));
    expect(entries(join(dir, 'other'))).toEqual([]);
  });
});

describe('watching the input through a run (issue 19, item 15)', () => {
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
