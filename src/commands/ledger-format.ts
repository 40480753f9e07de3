/** How `enrich ledger` writes times and tables, in text and JSON. */

/** Times in JSON: ISO 8601 UTC, as every JSON this tool writes. */
export const iso = (ms: number | null): string | null => (ms === null ? null : new Date(ms).toISOString());
export const day = (ms: number | null): string => (ms === null ? '-' : new Date(ms).toISOString().slice(0, 10));
export const stamp = (ms: number | null): string => (ms === null ? '-' : new Date(ms).toISOString().slice(0, 16).replace('T', ' '));

/** A table of columns two spaces apart: numbers (the columns in `right`) right-aligned, words left. */
export function formatTable(header: readonly string[], table: readonly string[][], right: ReadonlySet<number>): string {
  const widths = header.map((h, i) => Math.max(h.length, ...table.map((row) => (row[i] as string).length)));
  const line = (cells: readonly string[]): string => cells.map((c, i) => (right.has(i) ? c.padStart(widths[i] as number) : c.padEnd(widths[i] as number))).join('  ').trimEnd();
  return [line(header), ...table.map(line)].join('\n');
}
