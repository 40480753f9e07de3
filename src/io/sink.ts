import { createWriteStream, type WriteStream } from 'node:fs';
import { once } from 'node:events';
import { randomBytes } from 'node:crypto';
import { readdir, rename, rm } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { isProcessAlive } from '../process-alive.js';

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
  const dir = dirname(destination);
  for (const name of await readdir(dir).catch(() => [] as string[])) {
    if (!name.startsWith(prefix)) continue;
    const pid = Number(name.slice(prefix.length).split('-')[0]);
    if (Number.isInteger(pid) && pid !== process.pid && !isProcessAlive(pid)) await rm(join(dir, name), { force: true });
  }
}

/**
 * A file is written to a private (0600) temp file beside it and renamed into place at the end,
 * so a crash never leaves a half-written output that looks finished. Writes respect backpressure.
 */
export async function openSink(destination: string, stdout: NodeJS.WritableStream): Promise<Sink> {
  if (destination === '-') {
    return {
      write: async (chunk) => {
        if (!stdout.write(chunk)) await once(stdout, 'drain');
      },
      finish: async () => {},
      abort: async () => {},
    };
  }
  const tempPath = join(dirname(destination), `${tempPrefix(destination)}${process.pid}-${randomBytes(4).toString('hex')}`);
  const file: WriteStream = createWriteStream(tempPath, { mode: 0o600 });
  await once(file, 'open');
  return {
    write: async (chunk) => {
      if (!file.write(chunk)) await once(file, 'drain');
    },
    finish: async () => {
      file.end();
      await once(file, 'finish');
      await rename(tempPath, destination);
      await removeOrphans(destination);
    },
    abort: async () => {
      file.destroy();
      await rm(tempPath, { force: true });
    },
  };
}
