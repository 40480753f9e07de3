import { randomBytes } from 'node:crypto';
import { mkdirSync, renameSync } from 'node:fs';
import { open, stat, truncate } from 'node:fs/promises';
import { dirname } from 'node:path';
import { UsageError } from '../errors.js';
import { JOURNAL_FORMAT, type EventEntry, type HeaderEntry, type InputIdentity } from './entries.js';
import { acquireLock, type Lock } from './lock.js';
import { JournalCorruptError, readJournal } from './reader.js';
import { JournalWriter } from './writer.js';

export type * from './entries.js';
export { JournalWriter } from './writer.js';

export interface JournalIdentity {
  input: InputIdentity;
  column: string;
  service: string;
}

export interface OpenOptions {
  identity: JournalIdentity;
  tool: string;
  fresh: boolean;
  dryRun: boolean;
  /** Called for every event already in the journal, in order, before anything is appended. */
  replay: (entry: EventEntry, offset: number, length: number) => void;
  now?: () => Date;
}

export interface Journal {
  readonly path: string;
  readonly header: HeaderEntry;
  /** Whether this invocation created the journal (false: it resumes one). */
  readonly created: boolean;
  /** This invocation's number, 1 for the first. */
  readonly session: number;
  /** Where an earlier journal went when --fresh moved it aside. */
  readonly setAside: string | null;
  readonly tornBytes: number;
  readonly writer: JournalWriter;
  /** Flushes, syncs and unlocks. Safe to call twice. */
  close(): Promise<void>;
  /** For a hard exit: unlock without waiting (the file itself is always valid up to a torn tail). */
  releaseLockSync(): void;
}

/** A new or renamed file survives a power loss only once its directory entry is synced too. */
async function syncDirectory(path: string): Promise<void> {
  const dir = await open(dirname(path), 'r');
  try {
    await dir.sync();
  } catch {
    // some filesystems refuse fsync on a directory; the file itself is synced regardless
  } finally {
    await dir.close();
  }
}

async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch {
    return false;
  }
}

function describeInput(input: InputIdentity): string {
  return `"${input.name}" (${input.bytes.toLocaleString('en-US')} bytes, sha256 ${input.sha256.slice(0, 12)}…)`;
}

function checkCompatible(path: string, header: HeaderEntry, identity: JournalIdentity): void {
  const startOver = `run with --fresh to start over (the old journal is kept beside it), or pass another --journal`;
  if (header.format !== JOURNAL_FORMAT) {
    throw new UsageError(`${path} is a journal of format ${String(header.format)}, which this enrich cannot read; ${startOver}`);
  }
  if (header.input.sha256 !== identity.input.sha256) {
    throw new UsageError(
      `${path} belongs to a different input: it was written for ${describeInput(header.input)} on ${header.created.slice(0, 10)}, ` +
        `this input is ${describeInput(identity.input)}; ${startOver}`,
    );
  }
  if (header.column !== identity.column) {
    throw new UsageError(`${path} was written reading the column "${header.column}", this run reads "${identity.column}"; pass --column "${header.column}" to resume, or ${startOver}`);
  }
  if (header.service !== identity.service) {
    throw new UsageError(`${path} was written against ${header.service}, this run uses ${identity.service}; ${startOver}`);
  }
}

/**
 * Opens (or creates) the journal for a run: lock it, check it belongs to this input and these
 * options, replay it, cut a torn tail, and start a new session. Nothing is billed before this
 * returns, so every refusal here costs nothing.
 */
export async function openJournal(path: string, options: OpenOptions): Promise<Journal> {
  const now = options.now ?? (() => new Date());
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  const lock: Lock = acquireLock(path);
  try {
    let setAside: string | null = null;
    if (options.fresh && (await exists(path))) {
      // Paid records are never deleted: --fresh moves the old journal aside.
      setAside = `${path}.replaced-${now().toISOString().replace(/[:.]/g, '-')}`;
      renameSync(path, setAside);
      await syncDirectory(path);
    }

    let header: HeaderEntry | undefined;
    let sessions = 0;
    let tornBytes = 0;
    let size = 0;
    const created = !(await exists(path));
    if (created) {
      header = {
        t: 'header',
        format: JOURNAL_FORMAT,
        run: randomBytes(8).toString('hex'),
        created: now().toISOString(),
        tool: options.tool,
        input: options.identity.input,
        column: options.identity.column,
        service: options.identity.service,
      };
      const handle = await open(path, 'wx', 0o600);
      const line = `${JSON.stringify(header)}\n`;
      await handle.write(line);
      await handle.datasync();
      await handle.close();
      await syncDirectory(path);
      size = Buffer.byteLength(line);
    } else {
      let result;
      try {
        result = await readJournal(path, (entry, offset, length) => {
          if (header === undefined) {
            if (entry.t !== 'header') throw new JournalCorruptError('its first line is not a journal header');
            header = entry;
            checkCompatible(path, header, options.identity);
            return;
          }
          if (entry.t === 'header') throw new JournalCorruptError('it has a second header');
          if (entry.t === 'session') sessions = Math.max(sessions, entry.n);
          options.replay(entry, offset, length);
        });
      } catch (error) {
        if (error instanceof JournalCorruptError) throw new UsageError(`${path} is not a usable enrich journal: ${error.message}`, { cause: error });
        throw error;
      }
      if (header === undefined) throw new UsageError(`${path} is not an enrich journal (it has no header); use --fresh or another --journal`);
      tornBytes = result.tornBytes;
      // A torn tail must go before anything is appended, or the next line would be glued to it.
      if (tornBytes > 0) await truncate(path, result.validBytes);
      size = result.validBytes;
    }

    const writer = await JournalWriter.open(path, size);
    const session = sessions + 1;
    await writer.append({ t: 'session', n: session, at: now().toISOString(), pid: process.pid, dry_run: options.dryRun }, true).written;
    const finalHeader = header as HeaderEntry;
    let closed = false;
    return {
      path,
      header: finalHeader,
      created,
      session,
      setAside,
      tornBytes,
      writer,
      close: async () => {
        if (closed) return;
        closed = true;
        try {
          await writer.close();
        } finally {
          lock.release();
        }
      },
      releaseLockSync: () => lock.release(),
    };
  } catch (error) {
    lock.release();
    throw error;
  }
}
