/**
 * Loads the CLI's bundle (dist/enrich.cjs) through V8's code cache, as Node 22's own compile
 * cache and the v8-compile-cache package do: the bytecode of every function a batch run compiled
 * is kept after the run, so the next run reads it instead of parsing and compiling the bundle's
 * code again (13 ms of a 122 ms rerun with nothing to do, measured).
 *
 * The cache is a file in `$XDG_CACHE_HOME/enrich/` (else `~/.cache/enrich/`), named for the
 * bundle's content and for Node's version, architecture and command-line flags (V8 refuses a
 * cache made under other flags). V8 checks neither a cache's integrity nor, beyond its length,
 * which source it was made from: a damaged file would be a fatal error at start-up. So each file
 * starts with the sha256 of the source it was made from and of its own data, both checked before
 * V8 sees it. The folder must be this user's and writable by no one else, or the cache is not
 * used. `ENRICH_CODE_CACHE=0` turns it off. Nothing here may fail a run: a cache that cannot be
 * read, checked or written is done without.
 *
 * Built on its own (dist/code-cache.cjs), loaded by bin/enrich.cjs before the bundle, so it
 * imports only Node's built-ins.
 */
import { createHash, randomBytes } from 'node:crypto';
import { closeSync, fsyncSync, lstatSync, openSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeSync } from 'node:fs';
import { createRequire, wrap } from 'node:module';
import { homedir } from 'node:os';
import { dirname, isAbsolute, join } from 'node:path';
import { Script } from 'node:vm';
import { startFlags } from '../node-flags.js';
import { makeDirs } from '../io/paths.js';

export type CacheUse = 'accepted' | 'rejected' | 'none' | 'off';

export interface LoadedBundle<T> {
  exports: T;
  /** What became of the cache: used, refused (damaged, or by V8), there was none, or not kept at all. */
  cache: CacheUse;
  /** Keeps the code compiled so far for the next run, unless the cache it loaded was used. */
  save(): void;
}

const MAGIC = Buffer.from('enrichv8');
const HEADER = MAGIC.length + 64;
const PREFIX = 'enrich.cjs-';
/** Caches untouched this long (other builds, other Node versions) are removed when one is written. */
const PRUNE_AFTER_MS = 30 * 24 * 3600 * 1000;

const sha256 = (data: Buffer | string): Buffer => createHash('sha256').update(data).digest();

/** Where the cache lives, or null when it is turned off or there is no home to put it in. */
export function codeCacheDir(env: NodeJS.ProcessEnv): string | null {
  if (env['ENRICH_CODE_CACHE'] === '0') return null;
  const xdg = env['XDG_CACHE_HOME'];
  // A relative XDG_CACHE_HOME is ignored, as the XDG spec says.
  if (xdg !== undefined && isAbsolute(xdg)) return join(xdg, 'enrich');
  try {
    return join(homedir(), '.cache', 'enrich');
  } catch {
    return null; // no HOME and no passwd entry (an arbitrary uid in a container)
  }
}

/**
 * Only this user's folder (a link to one is followed) or file (not a link), written by no one
 * else: its bytecode would run as ours. Windows reports no such modes: there, any will do.
 */
function ours(path: string, directory: boolean): boolean {
  const st = directory ? statSync(path) : lstatSync(path);
  if (directory ? !st.isDirectory() : !st.isFile()) return false;
  if (process.platform === 'win32') return true;
  const uid = process.getuid?.();
  return (uid === undefined || st.uid === uid) && (st.mode & 0o022) === 0;
}

/** The flags this Node was started with: a cache made under other flags is refused by V8. */
function flagsKey(env: NodeJS.ProcessEnv): string {
  const flags = startFlags(env);
  return flags === '\n' ? 'default' : sha256(flags).toString('hex').slice(0, 8);
}

/** The cache's data if the file is intact and was made from `sourceHash`; null otherwise. */
function checked(file: Buffer, sourceHash: Buffer): Buffer | null {
  if (file.length <= HEADER || !file.subarray(0, MAGIC.length).equals(MAGIC)) return null;
  if (!file.subarray(MAGIC.length, MAGIC.length + 32).equals(sourceHash)) return null;
  const data = file.subarray(HEADER);
  return file.subarray(MAGIC.length + 32, HEADER).equals(sha256(data)) ? data : null;
}

/** Runs `file` as a CommonJS module compiled with its code cache; its exports. */
export function loadBundle<T>(file: string, env: NodeJS.ProcessEnv = process.env): LoadedBundle<T> {
  const bytes = readFileSync(file);
  const source = bytes.toString('utf8');
  const dir = codeCacheDir(env);
  const sourceHash = sha256(bytes);
  const path = dir === null ? null : join(dir, `${PREFIX}${sourceHash.toString('hex').slice(0, 16)}-${process.version}-${process.arch}-${flagsKey(env)}.v8`);
  let cache: CacheUse = path === null ? 'off' : 'none';
  let cachedData: Buffer | null = null;
  if (path !== null) {
    try {
      if (!ours(dir as string, true)) cache = 'off';
      else if (ours(path, false)) {
        cachedData = checked(readFileSync(path), sourceHash);
        if (cachedData === null) cache = 'rejected';
      }
    } catch {
      // no folder or no file yet: nothing to use, one to write
    }
  }
  const script = new Script(wrap(source), { filename: file, ...(cachedData === null ? {} : { cachedData }) });
  if (cachedData !== null) cache = script.cachedDataRejected === true ? 'rejected' : 'accepted';
  const module = { exports: {} as T };
  const run = script.runInThisContext() as (exports: T, require: NodeJS.Require, module: { exports: T }, filename: string, dirname: string) => void;
  run.call(module.exports, module.exports, createRequire(file), module, file, dirname(file));
  return {
    exports: module.exports,
    cache,
    save: () => {
      if (path !== null && (cache === 'none' || cache === 'rejected')) save(script, sourceHash, path);
    },
  };
}

function save(script: Script, sourceHash: Buffer, path: string): void {
  const dir = dirname(path);
  // A name of its own, created exclusively: two processes (or containers that are all pid 1)
  // writing at once each write their own, and the last rename wins whole.
  const tmp = `${path}.${randomBytes(6).toString('hex')}.tmp`;
  try {
    const data = script.createCachedData();
    makeDirs(dir, 0o700);
    if (!ours(dir, true)) return;
    const fd = openSync(tmp, 'wx', 0o600);
    try {
      writeSync(fd, Buffer.concat([MAGIC, sourceHash, sha256(data), data]));
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, path);
    prune(dir, path);
  } catch {
    try {
      rmSync(tmp, { force: true });
    } catch {
      // nothing more to do: the next run compiles as usual
    }
  }
}

/** Removes caches (and leftover temporary files) nobody has written for a month. */
function prune(dir: string, kept: string): void {
  const now = Date.now();
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (!name.startsWith(PREFIX) || path === kept) continue;
    if (now - statSync(path).mtimeMs > PRUNE_AFTER_MS) rmSync(path, { force: true });
  }
}
