import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { codeCacheDir, loadBundle } from '../src/cli/code-cache.js';
import { tempDir } from './helpers/cli.js';
import { runProcess } from './helpers/spawn.js';

const caches = (dir: string): string[] => (existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith('.v8')) : []);
const ROOT = join(import.meta.dirname, '..');

describe("the bundle's V8 code cache", () => {
  let dir: ReturnType<typeof tempDir>;
  beforeEach(() => {
    dir = tempDir();
  });
  afterEach(() => {
    dir.cleanup();
  });

  it('is kept after a run, used by the next, and never meets another build of the same length', () => {
    const env = { XDG_CACHE_HOME: join(dir.path, 'cache') };
    const cacheDir = codeCacheDir(env) as string;
    const file = dir.file('b.cjs', 'exports.add = (a, b) => a + b; exports.where = [__filename, typeof require.resolve];');
    const first = loadBundle<{ add(a: number, b: number): number; where: [string, string] }>(file, env);
    expect(first.cache).toBe('none');
    expect(first.exports.add(2, 3)).toBe(5);
    expect(first.exports.where).toStrictEqual([file, 'function']);
    first.save();
    expect(caches(cacheDir)).toHaveLength(1);

    const second = loadBundle<{ add(a: number, b: number): number }>(file, env);
    expect(second.cache).toBe('accepted');
    expect(second.exports.add(2, 3)).toBe(5);

    // Another build of the same length: V8 would take the first one's cache; its name and
    // header keep them apart.
    writeFileSync(file, 'exports.add = (a, b) => a * b; exports.where = [__filename, typeof require.resolve];');
    const rebuilt = loadBundle<{ add(a: number, b: number): number }>(file, env);
    expect(rebuilt.cache).toBe('none');
    expect(rebuilt.exports.add(2, 3)).toBe(6);
    rebuilt.save();
    expect(caches(cacheDir)).toHaveLength(2);
    expect(loadBundle(file, env).cache).toBe('accepted');
  });

  it('refuses a damaged cache before V8 sees it, and writes it again', () => {
    const env = { XDG_CACHE_HOME: join(dir.path, 'cache') };
    const file = dir.file('b.cjs', `exports.sum = (xs) => xs.reduce((a, b) => a + b, 0); ${'exports.f%d = () => %d; '.repeat(200).replace(/%d/g, () => String(Math.random()).slice(2, 8))}`);
    loadBundle(file, env).save();
    const [name] = caches(codeCacheDir(env) as string);
    const path = join(codeCacheDir(env) as string, name as string);
    // Bytes flipped in the middle, the length unchanged: a fatal error in V8 if it got them.
    const bytes = readFileSync(path);
    for (let i = 0; i < 64; i++) bytes[(bytes.length >> 1) + i] = (bytes[(bytes.length >> 1) + i] as number) ^ 0xff;
    writeFileSync(path, bytes);
    const damaged = loadBundle<{ sum(xs: number[]): number }>(file, env);
    expect(damaged.cache).toBe('rejected');
    expect(damaged.exports.sum([1, 2, 3])).toBe(6);
    damaged.save();
    expect(loadBundle(file, env).cache).toBe('accepted');
  });

  it('is off with ENRICH_CODE_CACHE=0 or in a folder others may write, and a cache that cannot be written fails nothing', () => {
    const file = dir.file('b.cjs', 'exports.x = 1;');
    const off = loadBundle<{ x: number }>(file, { XDG_CACHE_HOME: join(dir.path, 'cache'), ENRICH_CODE_CACHE: '0' });
    expect(off.cache).toBe('off');
    off.save();
    expect(existsSync(join(dir.path, 'cache'))).toBe(false);

    const shared = join(dir.path, 'shared');
    mkdirSync(join(shared, 'enrich'), { recursive: true });
    chmodSync(join(shared, 'enrich'), 0o777);
    const open = loadBundle<{ x: number }>(file, { XDG_CACHE_HOME: shared });
    expect(open.cache).toBe('off');
    open.save();
    expect(caches(join(shared, 'enrich'))).toHaveLength(0);

    const blocked = dir.file('blocked', 'a file where the folder would go');
    const unwritable = loadBundle<{ x: number }>(file, { XDG_CACHE_HOME: blocked });
    expect(unwritable.exports.x).toBe(1);
    expect(() => unwritable.save()).not.toThrow();
  });

  it('is kept by a batch run, not by --help', async () => {
    const cache = join(dir.path, 'cache');
    const env = { XDG_CACHE_HOME: cache };
    await runProcess(['--help'], { env });
    expect(caches(join(cache, 'enrich'))).toHaveLength(0);
    const input = dir.file('in.csv', 'domain\nacme.com\n');
    const run = await runProcess(['--sandbox', input, '-o', dir.file('out.csv'), '--quiet', '--store', join(dir.path, 'store.db')], { env });
    expect(run.code).toBe(0);
    const [kept] = caches(join(cache, 'enrich'));
    expect(kept).toBeDefined();
    expect(readFileSync(join(cache, 'enrich', kept as string)).length).toBeGreaterThan(10_000);
  });

  // tuneHeap sets its flag only on the V8s it is known on (Node 20 to 24).
  const tunes = [11, 12, 13].includes(Number(process.versions.v8.split('.')[0]));
  it.runIf(tunes)('is made under the flags every run starts with: those a run set (a big input, the HTTP parser\'s compile) are put back first', () => {
    // Child 1 tunes the heap as a big input's run does, then makes a cache; child 2, started
    // with Node's default flags, checks whether V8 takes it.
    const make = (restore: boolean): string => {
      const out = join(dir.path, `${restore}.v8`);
      execFileSync(process.execPath, [
        '--import',
        'tsx',
        '-e',
        `const { tuneHeap, baselineWasm, restoreV8Flags } = await import(${JSON.stringify(join(ROOT, 'src/heap.ts'))});
         const { Script } = await import('node:vm'); const fs = await import('node:fs');
         tuneHeap(64 * 1024 * 1024, {});
         baselineWasm();
         const s = new Script('(function () { return 1 + 1; })()', { filename: 'x.js' }); s.runInThisContext();
         ${restore ? 'restoreV8Flags();' : ''}
         fs.writeFileSync(${JSON.stringify(out)}, s.createCachedData());`,
      ], { cwd: ROOT });
      return out;
    };
    const verdict = (path: string): string =>
      execFileSync(process.execPath, [
        '-e',
        `const { Script } = require('node:vm');
         const s = new Script('(function () { return 1 + 1; })()', { filename: 'x.js', cachedData: require('node:fs').readFileSync(process.argv[1]) });
         process.stdout.write(s.cachedDataRejected ? 'rejected' : 'accepted');`,
        path,
      ]).toString();
    expect(verdict(make(false))).toBe('rejected');
    expect(verdict(make(true))).toBe('accepted');
  });
});
