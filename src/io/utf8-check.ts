import { isUtf8 } from 'node:buffer';

/**
 * Whether a file read chunk by chunk is UTF-8 all through, not only in the sample its format was
 * detected from, and where the first byte that is not sits. A character cut between two chunks
 * is held back and checked with the next.
 */
export class Utf8Check {
  /** The file offset of the first byte that is not UTF-8 (near it, at worst); null while all is. */
  firstInvalid: number | null = null;
  private carry: Buffer | null = null;
  private offset = 0;

  push(chunk: Buffer): void {
    if (this.firstInvalid !== null) return;
    const buf = this.carry === null ? chunk : Buffer.concat([this.carry, chunk]);
    const cut = completeLength(buf);
    const whole = buf.subarray(0, cut);
    if (!isUtf8(whole)) {
      this.firstInvalid = this.offset + invalidAt(whole);
      return;
    }
    this.offset += cut;
    this.carry = cut < buf.length ? Buffer.from(buf.subarray(cut)) : null;
  }

  /** At the end of the file: a character left cut short is not UTF-8. */
  end(): void {
    if (this.firstInvalid === null && this.carry !== null) this.firstInvalid = this.offset;
  }
}

/** `buf`'s length without a multi-byte character its end cuts short. */
function completeLength(buf: Buffer): number {
  for (let i = buf.length - 1; i >= 0 && i >= buf.length - 3; i--) {
    const byte = buf[i] as number;
    if ((byte & 0xc0) === 0x80) continue; // a continuation byte: look further back for its lead
    const needs = byte >= 0xf0 ? 4 : byte >= 0xe0 ? 3 : byte >= 0xc0 ? 2 : 1;
    return buf.length - i < needs ? i : buf.length;
  }
  return buf.length;
}

/** Where in `buf` (not UTF-8) the first bad sequence starts: the longest prefix that is UTF-8. */
function invalidAt(buf: Buffer): number {
  let good = 0;
  let bad = buf.length;
  // isUtf8 of a prefix is false when the prefix ends inside a character, so trim those first.
  while (bad - good > 1) {
    const mid = (good + bad) >>> 1;
    const end = completeLength(buf.subarray(0, mid));
    if (end > good && isUtf8(buf.subarray(0, end))) good = end;
    else bad = mid;
  }
  return good;
}
