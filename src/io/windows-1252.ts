/** Text to Windows-1252, for columns appended to a non-UTF-8 CSV (its rows are copied as is, so the file keeps one encoding); unmappable characters become '?'. */
const EXTRA: ReadonlyMap<number, number> = new Map(
  [0x20ac, 0, 0x201a, 0x0192, 0x201e, 0x2026, 0x2020, 0x2021, 0x02c6, 0x2030, 0x0160, 0x2039, 0x0152, 0, 0x017d, 0,
   0, 0x2018, 0x2019, 0x201c, 0x201d, 0x2022, 0x2013, 0x2014, 0x02dc, 0x2122, 0x0161, 0x203a, 0x0153, 0, 0x017e, 0x0178]
    .map((cp, i) => [cp, 0x80 + i] as [number, number])
    .filter(([cp]) => cp !== 0),
);

export function encodeWindows1252(text: string): Buffer {
  const out = Buffer.allocUnsafe(text.length);
  let n = 0;
  for (const ch of text) {
    const cp = ch.codePointAt(0) as number;
    out[n++] = cp < 0x80 || (cp >= 0xa0 && cp <= 0xff) ? cp : (EXTRA.get(cp) ?? 0x3f);
  }
  return out.subarray(0, n);
}
