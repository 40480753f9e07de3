import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { codeCacheDir, loadBundle } from '../src/cli/code-cache.js';
import { tempDir } from './helpers/cli.js';
import { runProcess } from './helpers/spawn.js';

/** A stand-in for dist/enrich.cjs: a CommonJS file with its build id beside it. */
function bundle(dir: ReturnType<typeof tempDir>, body: string, id: string): string {
  const file = dir.file('b.cjs', body);
  writeFileSync(`${file}.sha256`, `${id}\n`);
  return file;
}

const caches = (dir: string): string[] => (existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith('.v8')) : []);

describe("the bundle's V8 code cache", () => {
  it('is kept after a run, used by the next, and never meets another build of the same length', () => {
    const dir = tempDir();
    try {
      const env = { XDG_CACHE_HOME: join(dir.path, 'cache') };
      const cacheDir = codeCacheDir(env) as string;
      const file = bundle(dir, 'exports.add = (a, b) => a + b; exports.where = [__filename, typeof require.resolve];', 'a'.repeat(64));
      const first = loadBundle<{ add(a: number, b: number): number; where: [string, string] }>(file, env);
      expect(first.cache).toBe('none');
      expect(first.exports.add(2, 3)).toBe(5);
      expect(first.exports.where).toStrictEqual([file, 'function']);
      first.save();
      expect(caches(cacheDir)).toHaveLength(1);

      const second = loadBundle<{ add(a: number, b: number): number }>(file, env);
      expect(second.cache).toBe('accepted');
      expect(second.exports.add(2, 3)).toBe(5);

      // Another build, the same length: V8 would take the old cache; its name keeps it apart.
      writeFileSync(file, 'exports.add = (a, b) => a * b; exports.where = [__filename, typeof require.resolve];');
      writeFileSync(`${file}.sha256`, `${'b'.repeat(64)}\n`);
      const rebuilt = loadBundle<{ add(a: number, b: number): number }>(file, env);
      expect(rebuilt.cache).toBe('none');
      expect(rebuilt.exports.add(2, 3)).toBe(6);
      rebuilt.save();
      // The earlier build's cache is gone.
      expect(caches(cacheDir)).toHaveLength(1);
      expect(loadBundle(file, env).cache).toBe('accepted');
    } finally {
      dir.cleanup();
    }
  });

  it('is off with ENRICH_CODE_CACHE=0 or without a build id, and a cache that cannot be written fails nothing', () => {
    const dir = tempDir();
    try {
      const file = bundle(dir, 'exports.x = 1;', 'c'.repeat(64));
      const off = loadBundle<{ x: number }>(file, { XDG_CACHE_HOME: join(dir.path, 'cache'), ENRICH_CODE_CACHE: '0' });
      expect(off.cache).toBe('off');
      off.save();
      expect(existsSync(join(dir.path, 'cache'))).toBe(false);

      const blocked = dir.file('blocked', 'a file where the folder would go');
      const unwritable = loadBundle<{ x: number }>(file, { XDG_CACHE_HOME: blocked });
      expect(unwritable.exports.x).toBe(1);
      expect(() => unwritable.save()).not.toThrow();

      writeFileSync(`${file}.sha256`, 'not a hash\n');
      expect(loadBundle(file, { XDG_CACHE_HOME: join(dir.path, 'cache') }).cache).toBe('off');
    } finally {
      dir.cleanup();
    }
  });

  it('is kept by a batch run, not by --help, and made under the flags every run starts with', async () => {
    const dir = tempDir();
    try {
      const cache = join(dir.path, 'cache');
      const env = { XDG_CACHE_HOME: cache };
      await runProcess(['--help'], { env });
      expect(caches(join(cache, 'enrich'))).toHaveLength(0);
      // A run against the embedded sandbox: on Node 20 it also retunes the young generation.
      const input = dir.file('in.csv', 'domain\nacme.com\n');
      const run = await runProcess(['--sandbox', input, '-o', dir.file('out.csv'), '--quiet', '--store', join(dir.path, 'store.db')], { env });
      expect(run.code).toBe(0);
      const [kept] = caches(join(cache, 'enrich'));
      expect(kept).toBeDefined();
      // A fresh Node, with its default flags, takes it for the bundle.
      const bin = join(import.meta.dirname, '..', 'dist', 'enrich.cjs');
      const verdict = execFileSync(process.execPath, [
        '-e',
        `const { Script } = require('node:vm'); const { wrap } = require('node:module'); const fs = require('node:fs');
         const s = new Script(wrap(fs.readFileSync(process.argv[1], 'utf8')), { filename: process.argv[1], cachedData: fs.readFileSync(process.argv[2]) });
         process.stdout.write(s.cachedDataRejected ? 'rejected' : 'accepted');`,
        bin,
        join(cache, 'enrich', kept as string),
      ]).toString();
      expect(verdict).toBe('accepted');
      expect(readFileSync(join(cache, 'enrich', kept as string)).length).toBeGreaterThan(10_000);
    } finally {
      dir.cleanup();
    }
  });
});
