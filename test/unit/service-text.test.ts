import { describe, expect, it } from 'vitest';
import { neutraliseCell, stripControls } from '../../src/io/service-text.js';

describe('neutraliseCell (OWASP CSV injection)', () => {
  it.each([
    ['=1+1', "'=1+1"],
    ['+cmd', "'+cmd"],
    ['-2+3', "'-2+3"],
    ['@SUM(A1)', "'@SUM(A1)"],
    ['\tx', "'\tx"],
    ['Acme = good', 'Acme = good'],
    ['', ''],
    ["'quoted", "'quoted"],
  ])('%j -> %j', (input, output) => {
    expect(neutraliseCell(input)).toBe(output);
  });

  it('judges the first character after controls are stripped: a hidden NUL hides no formula', () => {
    expect(neutraliseCell('\u0000=1+1')).toBe("'=1+1");
    expect(neutraliseCell('\r=1+1')).toBe("'=1+1");
  });
});

describe('stripControls', () => {
  it('drops C0 (but tab and line feed), DEL and C1; keeps other text as is', () => {
    expect(stripControls('a\u0000b\u001b[31mc\u007fd\u009be\tf\ng\r')).toBe('ab[31mcde\tf\ng');
    const plain = 'Zürich — 東京';
    expect(stripControls(plain)).toBe(plain);
  });
});
