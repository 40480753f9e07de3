import { closeSync, openSync, readSync } from 'node:fs';
import type { CompanyRecord } from '../api/types.js';
import type { EnrichEntry } from './entries.js';

/**
 * Reads company records back from the journal by the offset and length of their line, so the
 * batch holds positions, not records: memory stays flat however many companies were bought.
 * (Rows repeating a company are served by the writers' result cache, not by reading again.)
 */
export class RecordReader {
  private readonly fd: number;
  private buffer = Buffer.alloc(16 * 1024);

  constructor(path: string) {
    this.fd = openSync(path, 'r');
  }

  read(ref: { offset: number; length: number }): CompanyRecord {
    if (this.buffer.length < ref.length) this.buffer = Buffer.alloc(ref.length * 2);
    const n = readSync(this.fd, this.buffer, 0, ref.length, ref.offset);
    const entry = JSON.parse(this.buffer.toString('utf8', 0, n)) as EnrichEntry;
    if (entry.t !== 'enrich' || entry.company === undefined) throw new Error(`journal line at byte ${ref.offset} is not an enrich record`);
    return entry.company;
  }

  close(): void {
    closeSync(this.fd);
  }
}
