import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, rmSync, statSync } from 'node:fs';
import { lstat, mkdir, open, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { addAbortSignal, Readable } from 'node:stream';
import { EnrichError, InputError, InterruptedError } from '../errors.js';
import { removeOfDeadProcesses } from '../process-alive.js';
import { SPOOL_LIMITS, SpoolGuard } from './spool-guard.js';

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

/** Spools live in one private folder per user, named `spool-<pid>-<random>`, so each run removes those whose process is gone (kill -9 leaves them). */
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

export const removeDeadSpools = (dir: string): Promise<void> => removeOfDeadProcesses(dir, (name) => Number(SPOOL.exec(name)?.[1] ?? Number.NaN));

/** A stream's chunks as Buffers (a test's Readable.from may hand over strings). */
async function* buffers(source: NodeJS.ReadableStream): AsyncGenerator<Buffer> {
  for await (const chunk of source as AsyncIterable<Buffer | string>) yield typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
}

/** Copies `source` into a new owner-only file, each chunk checked first; stops at once on `signal`. */
async function copyChecked(source: NodeJS.ReadableStream, path: string, guard: SpoolGuard, signal: AbortSignal): Promise<void> {
  // A read blocked on a quiet pipe must end too: destroying the stream ends the loop below.
  if (source instanceof Readable) addAbortSignal(signal, source);
  const file = await open(path, 'wx', 0o600);
  try {
    for await (const chunk of buffers(source)) {
      if (signal.aborted) break;
      guard.check(chunk);
      for (let at = 0; at < chunk.length; ) at += (await file.write(chunk, at)).bytesWritten;
    }
  } finally {
    await file.close();
  }
  if (signal.aborted) throw new InterruptedError('interrupted while reading the input; nothing was sent');
}

function spoolFailure(error: unknown, displayName: string, dir: string): Error {
  if (error instanceof EnrichError) return error;
  if ((error as Error).name === 'AbortError') return new InterruptedError('interrupted while reading the input; nothing was sent');
  const code = (error as NodeJS.ErrnoException).code;
  if (code === 'ENOSPC' || code === 'EDQUOT') {
    return new InputError(`cannot spool ${displayName}: the disk of ${dir} is full (${code}); set TMPDIR to a folder with more room, or give the input as a file`, { cause: error });
  }
  return new InputError(`cannot read ${displayName}: ${code ?? String(error)}`, { cause: error });
}

/**
 * The input is read twice (scan, then results in input order), so a stream (stdin, a FIFO, `<(...)`, a device) is first spooled to an
 * owner-only file. SpoolGuard bounds it by what no CSV does; it goes on Ctrl-C, SIGTERM or any exit (only kill -9 leaves one behind).
 */
async function spool(source: NodeJS.ReadableStream, displayName: string, signal: AbortSignal, limit: number): Promise<InputSource> {
  const dir = await spoolFolder();
  await removeDeadSpools(dir);
  const path = join(dir, `spool-${process.pid}-${randomBytes(6).toString('hex')}.csv`);
  const onExit = (): void => rmSync(path, { force: true });
  process.on('exit', onExit);
  const cleanup = async (): Promise<void> => {
    process.off('exit', onExit);
    await rm(path, { force: true });
  };
  try {
    await copyChecked(source, path, new SpoolGuard(displayName, dir, undefined, limit), signal);
  } catch (error) {
    await cleanup();
    throw spoolFailure(error, displayName, dir);
  }
  const { size } = await stat(path);
  return { path, displayName, fromStdin: true, bytes: size, cleanup };
}

/** `stdin` is asked for only when the input is `-` (opening it costs a little). */
export async function resolveInput(spec: string, stdin: () => NodeJS.ReadableStream, signal: AbortSignal = new AbortController().signal, limit: () => number = () => SPOOL_LIMITS.maxBytes): Promise<InputSource> {
  if (spec === '-') return spool(stdin(), 'stdin', signal, limit());
  let info;
  try {
    info = statSync(spec);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new InputError(code === 'ENOENT' ? `no such file: ${spec}` : `cannot read ${spec}: ${code ?? String(error)}`, { cause: error });
  }
  if (info.isDirectory()) throw new InputError(`${spec} is a directory, not a CSV file`);
  // A FIFO, `<(...)` (/dev/fd/N) or a device can be read once only, and has no size.
  if (!info.isFile()) return spool(createReadStream(spec), spec, signal, limit());
  return { path: spec, displayName: spec, fromStdin: false, bytes: info.size, cleanup: async () => {} };
}

/** The input's identity: sha256 of its bytes (hundreds of MB a second; no parsing). */
export async function hashFile(path: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(path, { highWaterMark: 1024 * 1024 }) as AsyncIterable<Buffer>) hash.update(chunk);
  return hash.digest('hex');
}
