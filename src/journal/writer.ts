import { open, type FileHandle } from 'node:fs/promises';
import { EnrichError, ExitCode } from '../errors.js';
import type { EventEntry } from './entries.js';

/** The journal cannot be written: every paid call stops, since none may go unrecorded. */
export class JournalWriteError extends EnrichError {
  override readonly name = 'JournalWriteError';
  constructor(path: string, cause: unknown) {
    const reason = (cause as NodeJS.ErrnoException).code ?? (cause as Error).message;
    super(`cannot write the journal ${path} (${reason}); no further paid call was made. Fix that, then run the same command to resume`, ExitCode.FAILURE, { cause });
  }
}

export interface Appended {
  /** Byte offset and length of the line in the file, so a record can be read back later. */
  offset: number;
  length: number;
  /** Settles when the line is written, and for a durable append also synced to disk. */
  written: Promise<void>;
}

interface Waiter {
  durable: boolean;
  resolve: () => void;
  reject: (error: Error) => void;
}

/**
 * Appends lines with group commit: everything queued while a write is in progress goes out in
 * the next single write(), followed by one fdatasync when any of it must be durable. Intents
 * cost one shared sync per batch, not one each, so durability does not cap throughput.
 */
export class JournalWriter {
  private queue: string[] = [];
  private waiters: Waiter[] = [];
  private draining: Promise<void> | null = null;
  private failure: JournalWriteError | null = null;
  private closed = false;
  /** fdatasync calls so far: one per batch that held a durable line, not one per line. */
  syncs = 0;

  private constructor(
    private readonly handle: FileHandle,
    private size: number,
    private readonly path: string,
  ) {}

  static async open(path: string, size: number): Promise<JournalWriter> {
    return new JournalWriter(await open(path, 'a', 0o600), size, path);
  }

  get bytes(): number {
    return this.size;
  }

  append(entry: EventEntry, durable = false): Appended {
    if (this.closed) throw new Error('journal is closed');
    // After a failed write the file may end in a partial line: appending more would glue a good
    // line onto it and turn a torn tail (dropped on resume) into corruption (refused).
    if (this.failure !== null) throw this.failure;
    const line = `${JSON.stringify(entry)}\n`;
    const length = Buffer.byteLength(line);
    const offset = this.size;
    this.size += length;
    this.queue.push(line);
    const written = new Promise<void>((resolve, reject) => {
      if (this.failure !== null) reject(this.failure);
      else this.waiters.push({ durable, resolve, reject });
    });
    // Callers may not wait on non-durable lines; a write failure still surfaces on flush/close.
    written.catch(() => {});
    this.draining ??= this.drain();
    return { offset, length, written };
  }

  /** Writes and syncs everything queued so far. */
  async flush(): Promise<void> {
    if (this.draining !== null) await this.draining;
    if (this.failure !== null) throw this.failure;
    await this.handle.datasync();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    try {
      await this.flush();
    } finally {
      this.closed = true;
      await this.handle.close();
    }
  }

  /** write(2) may write less than asked (a filling disk): keep going until all of it is down. */
  private async writeAll(data: Buffer): Promise<void> {
    for (let at = 0; at < data.length; ) {
      const { bytesWritten } = await this.handle.write(data, at, data.length - at);
      if (bytesWritten <= 0) throw new Error('the journal could not be written (no bytes accepted)');
      at += bytesWritten;
    }
  }

  private async drain(): Promise<void> {
    // Let every append of this turn of the event loop join the batch.
    await new Promise<void>((resolve) => setImmediate(resolve));
    while (this.queue.length > 0 && this.failure === null) {
      const lines = this.queue;
      const waiters = this.waiters;
      this.queue = [];
      this.waiters = [];
      try {
        await this.writeAll(Buffer.from(lines.length === 1 ? (lines[0] as string) : lines.join('')));
        if (waiters.some((w) => w.durable)) {
          await this.handle.datasync();
          this.syncs++;
        }
        for (const w of waiters) w.resolve();
      } catch (error) {
        this.failure = new JournalWriteError(this.path, error);
        for (const w of [...waiters, ...this.waiters]) w.reject(this.failure);
        this.waiters = [];
        this.queue = [];
      }
    }
    this.draining = null;
  }
}
