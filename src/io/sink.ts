import { once } from 'node:events';
import { accessSync, close, constants, createWriteStream, open, openSync, type WriteStream } from 'node:fs';
import { chmod, chown, rename, rm } from 'node:fs/promises';
import { Socket } from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';
import { basename, dirname, join, resolve } from 'node:path';
import { EnrichError, InterruptedError, UsageError } from '../errors.js';
import { removeOfDeadProcesses } from '../process-alive.js';
import { descriptorNumber, inheritedDescriptor, landsAt, lstatOrNull, ownDescriptor, plantedLink, statOrNull } from './paths.js';

/** Our stdout's reader stopped reading (`| head`): the store holds everything bought, so main() stops quietly (exit 141), as rg and qsv do. */
export class OutputClosedError extends EnrichError {
  override readonly name = 'OutputClosedError';
  constructor(cause: unknown) {
    super('stdout was closed before all results were written; everything bought is kept in the store, run the same command to write them again', 'closed_pipe', { cause });
  }
}

/** ENOSPC or EDQUOT while writing results: say so, rather than blame the reader. */
export class DiskFullError extends EnrichError {
  override readonly name = 'DiskFullError';
  constructor(where: string, code: string, cause: unknown) {
    const why = code === 'EDQUOT' ? 'the disk quota is used up' : 'the disk is full';
    super(`cannot write ${where}: ${why} (${code}); everything bought is kept in the store: free some space and run the same command to write them again`, 'failure', { cause });
  }
}

/** Any other failure to write a results file (EIO, a read-only file system, ...). */
export class OutputWriteError extends EnrichError {
  override readonly name = 'OutputWriteError';
  constructor(where: string, code: string, cause: unknown) {
    super(`cannot write ${where}: ${code}; everything bought is kept in the store, run the same command to write them again`, 'failure', { cause });
  }
}

/** What a failed write means, for the results going to `where` ("stdout" or a path). */
function writeFailure(where: string, error: unknown): EnrichError {
  const code = (error as NodeJS.ErrnoException | null | undefined)?.code;
  if (code === 'ENOSPC' || code === 'EDQUOT') return new DiskFullError(where === 'stdout' ? 'the results to stdout' : where, code, error);
  if (where === 'stdout' || code === undefined) return new OutputClosedError(error);
  return new OutputWriteError(where, code, error);
}

/** A signal came while results waited on a reader that stopped reading: what it never took is dropped, or the process would wait on those bytes. */
export class OutputStalledError extends InterruptedError {
  readonly stalled = true;
  constructor() {
    super(INTERRUPTED_WRITING);
  }
}

/** What a run stopped by a signal while it wrote its results says, stalled reader or not. */
export const INTERRUPTED_WRITING = 'interrupted while writing results; everything bought is in the store, run the same command to write them';

/** How often a signalled run looks whether its reader still takes what it writes (a reader behind a socket takes it in bursts). */
const STALL_CHECK_MS = 5000;

/** Writes with backpressure, and fails (rather than waits forever) once the stream is broken. */
async function writeTo(stream: NodeJS.WritableStream, chunk: string | Buffer, where: string, interrupt?: AbortSignal): Promise<void> {
  const w = stream as NodeJS.WritableStream & { destroyed?: boolean; errored?: Error | null };
  if (w.destroyed === true || (w.errored ?? null) !== null) throw writeFailure(where, w.errored);
  if (stream.write(chunk)) return;
  await until(stream, 'drain', where, interrupt);
}

/** Waits for `event` ('drain', or 'finish' once ended). After `interrupt`, a reader still taking bytes is waited for; one taking none between two looks is not. */
function until(stream: NodeJS.WritableStream, event: 'drain' | 'finish', where: string, interrupt: AbortSignal | undefined): Promise<void> {
  const w = stream as NodeJS.WritableStream & { errored?: Error | null; writableLength?: number; _handle?: { writeQueueSize?: number } | null };
  // What is still to go: the stream's count drops only as a whole write completes (256 KiB or more, more than a pipe holds),
  // libuv's as the kernel takes each part of one.
  const pending = (): [number, number] => [w.writableLength ?? 0, w._handle?.writeQueueSize ?? 0];
  return new Promise<void>((resolve, reject) => {
    let timer: NodeJS.Timeout | undefined;
    const done = (error?: unknown): void => {
      stream.off(event, onEvent);
      stream.off('error', onError);
      stream.off('close', onClose);
      interrupt?.removeEventListener('abort', onAbort);
      clearTimeout(timer);
      if (error === undefined) resolve();
      else reject(error instanceof InterruptedError ? error : writeFailure(where, error));
    };
    const onEvent = (): void => done();
    const onError = (error: unknown): void => done(error);
    const onClose = (): void => done(w.errored ?? new Error('closed'));
    if ((w.errored ?? null) !== null) return reject(writeFailure(where, w.errored));
    const onAbort = (): void => {
      let left = pending();
      const look = (): void => {
        const now = pending();
        // All taken (a write under the high-water mark emits no 'drain'): nothing to wait for.
        if (now[0] === 0) return done();
        if (now[0] >= left[0] && now[1] >= left[1]) return done(new OutputStalledError());
        left = now;
        timer = setTimeout(look, STALL_CHECK_MS);
      };
      timer = setTimeout(look, STALL_CHECK_MS);
    };
    stream.on(event, onEvent);
    stream.on('error', onError);
    stream.on('close', onClose);
    if (interrupt?.aborted === true) onAbort();
    else interrupt?.addEventListener('abort', onAbort, { once: true });
  });
}

/** Where results go: stdout, or a file that appears under its name only when complete. */
export interface Sink {
  write(chunk: string | Buffer): Promise<void>;
  finish(): Promise<void>;
  /** Drops a file output that was never finished. */
  abort(): Promise<void>;
}

/** Hidden, and named after the output, so an unfinished file never passes for the real one. */
const tempPrefix = (destination: string): string => `.${basename(destination)}.enrich-tmp-`;

/** Temp files left by runs killed mid-write (kill -9 skips every cleanup) go once a run finishes. */
async function removeOrphans(destination: string): Promise<void> {
  const prefix = tempPrefix(destination);
  await removeOfDeadProcesses(dirname(destination), (name) => (name.startsWith(prefix) ? Number(name.slice(prefix.length).split('-')[0]) : Number.NaN));
}

/** Why `path` cannot take results, or null: a directory, a missing or unwritable folder. Checked at start and again when the output opens. */
export function unwritableReason(path: string): string | null {
  // Synchronous on purpose: a few metadata calls at start-up cost microseconds each, and a thread-pool round trip each as promises.
  const existing = statOrNull(path);
  if (existing?.isDirectory() === true) return `${path} is a directory; give a file path, or - for stdout`;
  // Checked before the run opens its own files: a descriptor not open then is nobody's to name.
  const fd = descriptorNumber(path);
  if (fd !== null && existing === null) return `${path}: no descriptor ${fd} is open for enrich (as with \`${fd}> file\`)`;
  if (fd !== null && ownDescriptor(fd)) return `${path} is not a descriptor given to enrich (open one for it, as with \`${fd}> file\`), or give a file`;
  // Linux opens no socket by path (one reached through /dev/fd/N): say so now, not after the work.
  if (existing?.isSocket() === true) return `${path} is a socket, which cannot be opened by name; give a file, or - for stdout`;
  if (existing !== null && !existing.isFile()) return null; // a device or pipe: written in place
  const folder = dirname(resolve(path));
  const info = statOrNull(folder);
  if (info?.isDirectory() !== true) return `${path}: the folder ${folder} does not exist`;
  try {
    // The result is written beside the file and renamed over it: the folder must take writes.
    accessSync(folder, constants.W_OK);
  } catch {
    return `${path}: not allowed to write in ${folder}`;
  }
  return null;
}

/** The file results for `destination` go to: a symlink's target (followed link by link, even to a file not yet written; the link stays), else the path. */
export function outputTarget(destination: string): { target: string; viaLink: boolean } {
  const viaLink = lstatOrNull(destination)?.isSymbolicLink() === true;
  if (!viaLink) return { target: destination, viaLink };
  // A link to a pipe or device (`/dev/stdout`, bash's `>(gzip ...)`) is opened through the link: its target (`pipe:[N]`) names no file.
  const existing = statOrNull(destination);
  if (existing !== null && !existing.isFile() && !existing.isDirectory()) return { target: destination, viaLink };
  return { target: landsAt(destination), viaLink };
}

/** A new file `prefix` + random suffix, created O_EXCL (never an existing file or a planted link, so the suffix need not be unguessable), with `mode`. */
function createTemp(prefix: string, where: string, mode: number): { path: string; fd: number } {
  for (let attempt = 0; ; attempt++) {
    const path = `${prefix}${Math.floor(Math.random() * 2 ** 32).toString(16).padStart(8, '0')}`;
    try {
      return { path, fd: openSync(path, 'wx', mode) };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST' || attempt >= 16) throw writeFailure(where, error);
    }
  }
}

/** A sink over a file stream, with what to do once it is complete or abandoned. */
async function streamSink(
  path: string,
  where: string,
  options: { flags?: string; mode?: number; fd?: number; autoClose?: boolean },
  interrupt: AbortSignal | undefined,
  afterFinish: () => Promise<void> = async () => {},
  afterAbort: () => Promise<void> = async () => {},
): Promise<Sink> {
  const stream: WriteStream = createWriteStream(path, options);
  // A stream over a descriptor already open has no 'open' event to wait for.
  if (options.fd === undefined) {
    await once(stream, 'open').catch((error: unknown) => {
      throw writeFailure(where, error);
    });
  }
  return sinkOver(stream, where, interrupt, afterFinish, afterAbort);
}

/** Writes to `stream`; ends it (then `afterFinish`) once complete, or destroys it (then `afterAbort`). */
function sinkOver(stream: NodeJS.WritableStream & { destroy(): void }, where: string, interrupt: AbortSignal | undefined, afterFinish: () => Promise<void>, afterAbort: () => Promise<void>): Sink {
  // A failure between writes (EPIPE, ENOSPC) is kept on the stream and thrown by the next write or the end; unlistened it would end the process.
  stream.on('error', () => {});
  return {
    write: (chunk) => writeTo(stream, chunk, where, interrupt),
    finish: async () => {
      stream.end();
      // The last buffered bytes can fail here too (a full disk is often found at the end).
      await until(stream, 'finish', where, interrupt);
      await afterFinish();
    },
    abort: async () => {
      stream.destroy();
      await afterAbort();
    },
  };
}

/**
 * A FIFO, written on the event loop, never by a thread blocked in write(2) on a reader that stopped (a signal could not end such a run:
 * the process waits on that thread). Opened non-blocking, polling until a reader is there.
 */
async function pipeSink(target: string, where: string, interrupt: AbortSignal | undefined): Promise<Sink> {
  // A plain descriptor (a FileHandle would close it when collected): the socket owns it. Never a blocking open: it would hold a
  // thread the process waits on to exit until a reader came.
  const openFd = (): Promise<number> => new Promise((resolve, reject) => open(target, constants.O_WRONLY | constants.O_NONBLOCK, (error, fd) => (error === null ? resolve(fd) : reject(error))));
  let fd: number | undefined;
  while (fd === undefined) {
    try {
      fd = await openFd();
    } catch (error) {
      // No reader yet (ENXIO): look again shortly, as a blocking open would wait.
      if ((error as NodeJS.ErrnoException).code !== 'ENXIO') throw writeFailure(where, error);
      if (interrupt?.aborted === true) throw new InterruptedError(`interrupted while waiting for a reader of ${where}; everything bought is in the store, run the same command to write the results`);
      // An interrupt ends the wait early; the next turn of the loop says so.
      await delay(READER_LOOK_MS, undefined, interrupt === undefined ? undefined : { signal: interrupt }).catch(() => {});
    }
  }
  try {
    const socket = new Socket({ fd, readable: false, writable: true });
    return sinkOver(socket, where, interrupt, async () => void socket.destroy(), async () => {});
  } catch (error) {
    close(fd, () => {});
    throw writeFailure(where, error);
  }
}

/** How often a FIFO with no reader yet is looked at again. */
const READER_LOOK_MS = 100;

/**
 * A file is written beside its destination and renamed into place at the end (keeping the replaced file's mode), so a crash never
 * leaves a half-written output that looks finished. A symlink is followed; a device or pipe is written in place (renaming would replace
 * it); `-o /dev/stdout` or `/dev/stderr` goes through the descriptor (inheritedDescriptor).
 */
export async function openSink(destination: string, stdout: NodeJS.WritableStream, afterWork = false, interrupt?: AbortSignal): Promise<Sink> {
  const inherited = inheritedDescriptor(destination);
  if (destination === '-' || inherited === 1) {
    return {
      write: (chunk) => writeTo(stdout, chunk, 'stdout', interrupt),
      finish: async () => {},
      // Stopped by a signal with bytes still to go: the reader takes them, or is found stalled, rather than the process waiting for ever.
      abort: async () => {
        if (interrupt?.aborted === true && ((stdout as NodeJS.WritableStream & { writableLength?: number }).writableLength ?? 0) > 0) await until(stdout, 'drain', 'stdout', interrupt);
      },
    };
  }
  // Through the descriptor, left open for the messages after it.
  if (inherited === 2) return streamSink(destination, destination, { fd: 2, autoClose: false }, interrupt);
  // Synchronous checks, as above. A link planted since the run started is not followed.
  const { target } = outputTarget(destination);
  // Found only once a run has worked (it may have bought), these are a failure to write (exit 1), not a usage error, which says nothing was billed.
  const refused = plantedLink(destination) ?? unwritableReason(target);
  if (refused !== null && afterWork) throw new EnrichError(`cannot write the results: ${refused}; what was bought is kept in the store: once they can be written there, run the same command (nothing is bought again)`, 'failure');
  if (refused !== null) throw new UsageError(refused);
  const existing = statOrNull(target);
  if (existing !== null && existing.isFIFO()) return pipeSink(target, destination, interrupt);
  if (existing !== null && !existing.isFile()) return streamSink(target, destination, { flags: 'w' }, interrupt);
  // A file replaced keeps its mode (a shared results file stays readable to teammates); a new one gets the umask's.
  const { path: tempPath, fd } = createTemp(join(dirname(target), `${tempPrefix(target)}${process.pid}-`), destination, existing === null ? 0o666 : 0o600);
  return streamSink(
    tempPath,
    destination,
    { fd },
    interrupt,
    async () => {
      if (existing !== null) {
        await chmod(tempPath, existing.mode & 0o7777);
        // Its group too, where this user may give it (a member of it): teammates keep reading it.
        await chown(tempPath, -1, existing.gid).catch(() => {});
      }
      await rename(tempPath, target);
      await removeOrphans(target);
    },
    () => rm(tempPath, { force: true }),
  );
}
