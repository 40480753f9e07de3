import { createReadStream, createWriteStream, statSync } from 'node:fs';
import { lstat, mkdir, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import type * as Crypto from 'node:crypto';
import { builtin } from '../builtin.js';
import { InputError } from '../errors.js';
import { isProcessAlive } from '../process-alive.js';

export interface InputSource {
  /** A seekable file: the input itself, or stdin (or a pipe) spooled to a private temp file. */
  path: string;
  /** How messages name it: the path as given, or "stdin". */
  displayName: string;
  /** Spooled: stdin, or a pipe or device given by path. It has no folder or name of its own. */
  fromStdin: boolean;
  bytes: number;
  cleanup(): Promise<void>;
}

/**
 * Spools live in one private folder per user, named `spool-<pid>-<random>`: a run killed with
 * kill -9 cannot remove its own, so each run removes those whose process is gone.
 */
async function spoolFolder(): Promise<string> {
  const uid = process.getuid?.() ?? 0;
  const dir = join(tmpdir(), `enrich-${uid}`);
  await mkdir(dir, { mode: 0o700 }).catch((error: NodeJS.ErrnoException) => {
    if (error.code !== 'EEXIST') throw error;
  });
  // In a shared /tmp someone else could have made the folder first (or a link): refuse theirs.
  const info = await lstat(dir);
  if (!info.isDirectory() || info.uid !== uid || (info.mode & 0o077) !== 0) {
    throw new InputError(`cannot spool the input: ${dir} is not a private folder of this user; remove it or set TMPDIR`);
  }
  return dir;
}

const SPOOL = /^spool-(\d+)-[0-9a-f]+\.csv$/;

export async function removeDeadSpools(dir: string): Promise<void> {
  for (const name of await readdir(dir).catch(() => [] as string[])) {
    const pid = Number(SPOOL.exec(name)?.[1] ?? Number.NaN);
    if (Number.isInteger(pid) && pid !== process.pid && !isProcessAlive(pid)) await rm(join(dir, name), { force: true });
  }
}

/**
 * The batch reads its input twice (scan, then write results in input order), so a stream that
 * cannot be read twice (stdin, a FIFO, `<(...)`, a device) is first spooled to a file readable
 * only by the owner. A 1M-row input stays on disk, not in memory.
 */
async function spool(source: NodeJS.ReadableStream, displayName: string): Promise<InputSource> {
  const dir = await spoolFolder();
  await removeDeadSpools(dir);
  const { randomBytes } = builtin<typeof Crypto>('node:crypto');
  const path = join(dir, `spool-${process.pid}-${randomBytes(6).toString('hex')}.csv`);
  const cleanup = (): Promise<void> => rm(path, { force: true });
  try {
    await pipeline(source, createWriteStream(path, { mode: 0o600, flags: 'wx' }));
  } catch (error) {
    await cleanup();
    const code = (error as NodeJS.ErrnoException).code;
    throw new InputError(`cannot read ${displayName}: ${code ?? String(error)}`, { cause: error });
  }
  const { size } = await stat(path);
  return { path, displayName, fromStdin: true, bytes: size, cleanup };
}

/** `stdin` is asked for only when the input is `-` (opening it costs a little). */
export async function resolveInput(spec: string, stdin: () => NodeJS.ReadableStream): Promise<InputSource> {
  if (spec === '-') return spool(stdin(), 'stdin');
  let info;
  try {
    info = statSync(spec);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new InputError(code === 'ENOENT' ? `no such file: ${spec}` : `cannot read ${spec}: ${code ?? String(error)}`, { cause: error });
  }
  if (info.isDirectory()) throw new InputError(`${spec} is a directory, not a CSV file`);
  // A FIFO, `<(...)` (/dev/fd/N) or a device can be read once only, and has no size.
  if (!info.isFile()) return spool(createReadStream(spec), spec);
  return { path: spec, displayName: spec, fromStdin: false, bytes: info.size, cleanup: async () => {} };
}

/** The input's identity: sha256 of its bytes (hundreds of MB a second; no parsing). */
export async function hashFile(path: string): Promise<string> {
  const { createHash } = builtin<typeof Crypto>('node:crypto');
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(path, { highWaterMark: 1024 * 1024 }) as AsyncIterable<Buffer>) hash.update(chunk);
  return hash.digest('hex');
}
