/**
 * Loads the CLI's bundle (dist/enrich.cjs) through V8's code cache, as Node 22's own compile
 * cache and the v8-compile-cache package do: the bytecode of every function a batch run compiled
 * is kept after the run, so the next run reads it instead of parsing and compiling the bundle's
 * code again (13 ms of a 122 ms rerun with nothing to do, measured).
 *
 * The cache is a file in `$XDG_CACHE_HOME/enrich/` (else `~/.cache/enrich/`), named for the
 * bundle's content (its sha256, written by the build), size and time, and for Node's version
 * and architecture: V8 itself checks only the source's length, so the name is what keeps a
 * cache from ever meeting another bundle. V8 refuses a cache made by another V8 or under other
 * flags, and the bundle is then compiled as usual. `ENRICH_CODE_CACHE=0` turns it off. Nothing
 * here may fail a run: a cache that cannot be read or written is done without.
 *
 * Built on its own (dist/code-cache.cjs), loaded by bin/enrich.cjs before the bundle, so it
 * imports only Node's built-ins.
 */
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire, wrap } from 'node:module';
import { homedir } from 'node:os';
import { basename, dirname, isAbsolute, join } from 'node:path';
import { Script } from 'node:vm';

export type CacheUse = 'accepted' | 'rejected' | 'none' | 'off';

export interface LoadedBundle<T> {
  exports: T;
  /** What became of the cache: used, refused by V8, there was none, or not kept at all. */
  cache: CacheUse;
  /** Keeps the code compiled so far for the next run, unless the cache it loaded was used. */
  save(): void;
}

/** Where the cache lives, or null when it is turned off. */
export function codeCacheDir(env: NodeJS.ProcessEnv): string | null {
  if (env['ENRICH_CODE_CACHE'] === '0') return null;
  const xdg = env['XDG_CACHE_HOME'];
  // A relative XDG_CACHE_HOME is ignored, as the XDG spec says.
  return join(xdg !== undefined && isAbsolute(xdg) ? xdg : join(homedir(), '.cache'), 'enrich');
}

/** The cache file for this bundle under this Node, or null when the bundle has no build id. */
function cacheFile(file: string, env: NodeJS.ProcessEnv): string | null {
  const dir = codeCacheDir(env);
  if (dir === null) return null;
  try {
    const id = readFileSync(`${file}.sha256`, 'utf8').trim().slice(0, 16);
    if (!/^[0-9a-f]{16}$/.test(id)) return null;
    const st = statSync(file);
    return join(dir, `${basename(file)}-${id}-${st.size}-${Math.trunc(st.mtimeMs)}-${process.version}-${process.arch}.v8`);
  } catch {
    return null;
  }
}

/** Runs `file` as a CommonJS module compiled with its code cache; its exports. */
export function loadBundle<T>(file: string, env: NodeJS.ProcessEnv = process.env): LoadedBundle<T> {
  const source = readFileSync(file, 'utf8');
  const path = cacheFile(file, env);
  let cachedData: Buffer | undefined;
  if (path !== null) {
    try {
      cachedData = readFileSync(path);
    } catch {
      cachedData = undefined;
    }
  }
  const script = new Script(wrap(source), { filename: file, ...(cachedData === undefined ? {} : { cachedData }) });
  const cache: CacheUse = path === null ? 'off' : cachedData === undefined ? 'none' : script.cachedDataRejected === true ? 'rejected' : 'accepted';
  const module = { exports: {} as T };
  const run = script.runInThisContext() as (exports: T, require: NodeJS.Require, module: { exports: T }, filename: string, dirname: string) => void;
  run.call(module.exports, module.exports, createRequire(file), module, file, dirname(file));
  return {
    exports: module.exports,
    cache,
    save: () => {
      if (path !== null && cache !== 'accepted') save(script, path);
    },
  };
}

function save(script: Script, path: string): void {
  const dir = dirname(path);
  const tmp = `${path}.${process.pid}.tmp`;
  try {
    const data = script.createCachedData();
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    writeFileSync(tmp, data, { mode: 0o600 });
    renameSync(tmp, path);
    // The caches of earlier builds and Node versions are of no more use.
    const prefix = basename(path).split('-')[0] as string;
    for (const name of readdirSync(dir)) {
      if (name.startsWith(`${prefix}-`) && name.endsWith('.v8') && name !== basename(path)) rmSync(join(dir, name), { force: true });
    }
  } catch {
    try {
      rmSync(tmp, { force: true });
    } catch {
      // nothing more to do: the next run compiles as usual
    }
  }
}
