import { describe, expect, it } from 'vitest';
import { Utf8Check } from '../../src/io/utf8-check.js';

/** Feeds `bytes` cut at each of `cuts`, and says where the first byte that is not UTF-8 is. */
function check(bytes: Buffer, cuts: number[]): number | null {
  const c = new Utf8Check();
  let from = 0;
  for (const at of [...cuts, bytes.length]) {
    c.push(bytes.subarray(from, at));
    from = at;
  }
  c.end();
  return c.firstInvalid;
}

describe('Utf8Check', () => {
  const text = Buffer.from('name,domain\nMüller 😀,müller.de\n€uro,x.com\n');

  it('passes UTF-8 however it is cut, a character split between chunks included', () => {
    for (let at = 0; at <= text.length; at++) expect(check(text, [at]), `cut at ${at}`).toBeNull();
    expect(check(text, [13, 14, 15, 20, 21, 22, 23])).toBeNull();
  });

  it('finds the first byte that is not, wherever the chunks are cut', () => {
    const bad = Buffer.concat([text, Buffer.from('M\xfcller,a.de\nZ\xe9,b.fr\n', 'latin1')]);
    const at = text.length + 1;
    for (let cut = 0; cut <= bad.length; cut++) expect(check(bad, [cut]), `cut at ${cut}`).toBe(at);
  });

  it('says a character the file ends in the middle of is not UTF-8', () => {
    const cut = Buffer.from('a.com,M\xc3', 'latin1');
    expect(check(cut, [])).toBe(7);
  });
});

describe('Utf8Check, where the first bad byte is', () => {
  it('names the bad byte itself, not a character before it cut by the chunk boundary', () => {
    // The reviewer's case: an emoji cut by the 256 KiB boundary, a line break, then a Latin-1 byte.
    const head = Buffer.alloc(262143, 0x61);
    const bytes = Buffer.concat([head, Buffer.from('😀\n'), Buffer.from('\xc4rr.de,A\n', 'latin1')]);
    expect(check(bytes, [262144])).toBe(262143 + 4 + 1);
  });

  it('agrees with a character-by-character reading for random files cut at random places', () => {
    let seed = 7;
    const random = (n: number): number => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) % n);
    const pieces = ['a', 'é', '€', '😀', '\n', ',', 'z'];
    for (let round = 0; round < 300; round++) {
      const good = Buffer.from(Array.from({ length: 1 + random(60) }, () => pieces[random(pieces.length)]).join(''));
      const bad = Buffer.from([[0xff], [0xc3, 0x41], [0xe2, 0x82], [0xed, 0xa0, 0x80], [0xc0, 0xaf]][random(5)] as number[]);
      const bytes = Buffer.concat([good, bad, Buffer.from('tail.com\n')]);
      const cuts = Array.from({ length: random(4) }, () => random(bytes.length)).sort((a, b) => a - b);
      expect(check(bytes, cuts), `round ${round}`).toBe(good.length);
    }
  });
});
