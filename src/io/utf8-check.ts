import { isUtf8 } from 'node:buffer';

/** Whether a file read chunk by chunk is UTF-8 throughout (not only its sampled head), and where the first bad byte is; a character cut between chunks is checked with the next. */
export class Utf8Check {
  /** The file offset of the first byte that is not UTF-8; null while all is. */
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

/** How many bytes a character starting with `lead` takes (1 for a stray continuation byte). */
const sequenceLength = (lead: number): number => (lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1);

/** `buf`'s length without a multi-byte character its end cuts short. */
function completeLength(buf: Buffer): number {
  for (let i = buf.length - 1; i >= 0 && i >= buf.length - 3; i--) {
    const byte = buf[i] as number;
    if ((byte & 0xc0) === 0x80) continue; // a continuation byte: look further back for its lead
    return buf.length - i < sequenceLength(byte) ? i : buf.length;
  }
  return buf.length;
}

/** Where in `buf` (not UTF-8) the first bad sequence starts: character by character, once a file. */
function invalidAt(buf: Buffer): number {
  let i = 0;
  while (i < buf.length) {
    const byte = buf[i] as number;
    if (byte < 0x80) {
      i++;
      continue;
    }
    const length = sequenceLength(byte);
    // isUtf8 of the one character judges what a lead byte cannot: overlong forms, surrogates.
    if (length === 1 || i + length > buf.length || !isUtf8(buf.subarray(i, i + length))) return i;
    i += length;
  }
  return buf.length;
}
