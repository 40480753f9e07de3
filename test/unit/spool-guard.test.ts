import { describe, expect, it } from 'vitest';
import { InputError } from '../../src/errors.js';
import { SPOOL_LIMITS, SpoolGuard, stdinLimit, type DiskSpace } from '../../src/io/spool-guard.js';

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;
const lines = (bytes: number, end = '\n'): Buffer => Buffer.from(`${'a.com,'.padEnd(63, 'x')}${end}`.repeat(Math.ceil(bytes / 64)));

/** Feeds `total` bytes of `chunk`s into the guard; the error it threw, or null. */
function feed(guard: SpoolGuard, chunk: Buffer, total: number): unknown {
  try {
    for (let fed = 0; fed < total; fed += chunk.length) guard.check(chunk);
    return null;
  } catch (error) {
    return error;
  }
}

describe('SpoolGuard: what no real CSV does', () => {
  it('passes CSV with LF, CRLF or CR line ends, far past every check', () => {
    const roomy = (): DiskSpace => ({ free: 100 * GiB, size: 200 * GiB });
    for (const end of ['\n', '\r\n', '\r']) expect(feed(new SpoolGuard('stdin', '/tmp', roomy), lines(64 * 1024, end), 40 * MiB)).toBeNull();
  });

  it('refuses a NUL byte and a UTF-16 stream in the words a file given by path gets', () => {
    expect(feed(new SpoolGuard('stdin', '/tmp'), Buffer.from('domain\na.com\0\n'), 1)).toStrictEqual(new InputError('stdin is not a text file (it contains NUL bytes)'));
    expect(feed(new SpoolGuard('stdin', '/tmp'), Buffer.from('\xff\xfed\0o\0', 'latin1'), 1)).toStrictEqual(new InputError('stdin is UTF-16 encoded; save it as UTF-8 CSV and run again'));
  });

  it('refuses a line longer than 8 MiB, whether it spans chunks or ends inside one', () => {
    const noBreak = Buffer.alloc(64 * 1024, 'z');
    const error = feed(new SpoolGuard('/dev/fd/63', '/tmp'), noBreak, 16 * MiB);
    expect(error).toStrictEqual(new InputError('/dev/fd/63 is not CSV: more than 8 MiB without a line break'));
    // 8 MiB of no break, then a chunk whose line ends just past the limit.
    const guard = new SpoolGuard('stdin', '/tmp', () => null);
    for (let i = 0; i < SPOOL_LIMITS.maxLineBytes / noBreak.length; i++) guard.check(noBreak);
    expect(() => guard.check(Buffer.from('zz\nshort\n'))).toThrow('without a line break');
    // Exactly the limit is a line like any other.
    const exact = new SpoolGuard('stdin', '/tmp', () => null);
    for (let i = 0; i < SPOOL_LIMITS.maxLineBytes / noBreak.length; i++) exact.check(noBreak);
    expect(() => exact.check(Buffer.from('\nnext\n'))).not.toThrow();
  });

  it('stops while 5% of the disk (at most 1 GiB) is still free, checked every 8 MiB spooled', () => {
    let free = 2 * GiB;
    const disk = (): DiskSpace => ({ free, size: 100 * GiB });
    const guard = new SpoolGuard('stdin', '/tmp/enrich-1000', disk);
    const chunk = lines(MiB);
    // Each chunk "uses" what it spools.
    const spend = (): unknown => {
      try {
        for (;;) {
          guard.check(chunk);
          free -= chunk.length;
        }
      } catch (error) {
        return error;
      }
    };
    const error = spend() as Error;
    expect(error).toBeInstanceOf(InputError);
    expect(error.message).toMatch(/^stopped reading stdin after \d+ MiB: less than 1024 MiB left free on the disk of \/tmp\/enrich-1000; set TMPDIR to a folder with more room, or give the input as a file$/);
    expect(free).toBeLessThan(GiB);
    expect(free).toBeGreaterThan(GiB - SPOOL_LIMITS.freeCheckBytes - chunk.length);
    // A small disk keeps 5% of itself.
    expect(SPOOL_LIMITS.freeFloor(10 * GiB)).toBe(0.5 * GiB);
  });

  it('never asks about free space for a small input, so a nearly full disk takes a short list', () => {
    let asked = 0;
    const guard = new SpoolGuard('stdin', '/tmp', () => (asked++, { free: 0, size: GiB }));
    expect(feed(guard, lines(64 * 1024), 4 * MiB)).toBeNull();
    expect(asked).toBe(0);
  });

  // The limit: 4 GiB, or ENRICH_STDIN_LIMIT_MIB.
  it('stops a piped input past its limit, pointing at a file, which has none', () => {
    const roomy = (): DiskSpace => ({ free: 100 * GiB, size: 200 * GiB });
    expect(SPOOL_LIMITS.maxBytes).toBe(4 * GiB);
    expect(feed(new SpoolGuard('stdin', '/tmp', roomy, 2 * MiB), lines(64 * 1024), 2 * MiB)).toBeNull();
    expect(feed(new SpoolGuard('stdin', '/tmp', roomy, 2 * MiB), lines(64 * 1024), 3 * MiB)).toStrictEqual(
      new InputError('stopped reading stdin at 2 MiB: more than a CSV piped to enrich is taken to be; save it to a regular file and give that (no limit), or raise it with ENRICH_STDIN_LIMIT_MIB'),
    );
    expect(stdinLimit({ ENRICH_STDIN_LIMIT_MIB: '8192' })).toBe(8 * GiB);
    expect(stdinLimit({})).toBe(4 * GiB);
    expect(() => stdinLimit({ ENRICH_STDIN_LIMIT_MIB: '2GB' })).toThrow("ENRICH_STDIN_LIMIT_MIB must be a whole number of MiB, 1 or more ('2GB' given)");
  });
});
