import { open } from 'node:fs/promises';
import type { JournalEntry } from './entries.js';

export class JournalCorruptError extends Error {
  override readonly name = 'JournalCorruptError';
}

const NEWLINE = 0x0a;

/**
 * Streams the journal's lines with byte offsets; returns the bytes up to the end of the last whole, parseable line. A torn tail
 * (a crash, a power loss) is left unread, not fatal; a bad line with good ones after it is corruption.
 */
export async function readJournal(path: string, onEntry: (entry: JournalEntry, offset: number) => void | Promise<void>): Promise<{ validBytes: number }> {
  const handle = await open(path, 'r');
  try {
    const chunkSize = 1024 * 1024;
    let carry: Buffer = Buffer.alloc(0);
    let fileOffset = 0; // offset of carry[0]
    let validBytes = 0;
    let lines = 0;
    let badLine: { line: number; offset: number } | null = null;
    const buf = Buffer.allocUnsafe(chunkSize);
    for (;;) {
      const { bytesRead } = await handle.read(buf, 0, chunkSize, fileOffset + carry.length);
      if (bytesRead === 0) break;
      const data = carry.length === 0 ? buf.subarray(0, bytesRead) : Buffer.concat([carry, buf.subarray(0, bytesRead)]);
      let start = 0;
      for (let nl = data.indexOf(NEWLINE, start); nl !== -1; nl = data.indexOf(NEWLINE, start)) {
        const offset = fileOffset + start;
        const length = nl + 1 - start;
        lines++;
        let entry: JournalEntry | undefined;
        try {
          entry = JSON.parse(data.toString('utf8', start, nl)) as JournalEntry;
        } catch {
          entry = undefined;
        }
        if (entry === undefined || typeof entry !== 'object' || entry === null || typeof entry.t !== 'string') {
          badLine ??= { line: lines, offset };
        } else {
          if (badLine !== null) throw new JournalCorruptError(`line ${badLine.line} is not a journal entry, but later lines are`);
          const applied = onEntry(entry, offset);
          if (applied !== undefined) await applied;
          validBytes = offset + length;
        }
        start = nl + 1;
      }
      // Copy the partial line out: `buf` is reused by the next read.
      carry = Buffer.from(data.subarray(start));
      fileOffset += start;
    }
    return { validBytes };
  } finally {
    await handle.close();
  }
}
