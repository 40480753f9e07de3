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
