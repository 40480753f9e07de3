import { readFileSync } from 'node:fs';
import { rename, rm, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { ScanResult } from '../pipeline/scan.js';
import type { RunState } from '../pipeline/state.js';
import { IntVector } from '../pipeline/vector.js';
import type { CsvFormat } from './csv-reader.js';
import { makeDirs } from './paths.js';

/**
 * The scan's result beside the store, so a rerun skips parsing (a million rows: a fraction of a second, not several). A pure cache keyed by
 * the input's sha256 and --column, ignored when anything differs or it is damaged. Layout: a JSON header line, then the row refs (Int32),
 * the row ends (Uint32 or Float64), and the domains one a line.
 */
const FORMAT = 2;

export interface ScanKey {
  /** The tool version: normalisation or the row encoding may change between releases. */
  tool: string;
  /** The scan rules' revision (pipeline/scan-rules.ts): they may change within a version too. */
  rules: number;
  sha256: string;
  bytes: number;
  column: string | null;
  format: CsvFormat;
}

interface Header {
  format: number;
  key: ScanKey;
  header: string[];
  headerless: boolean;
  columnIndex: number;
  rows: number;
  invalidRows: number;
  headerRange: ScanResult['headerRange'];
  notUtf8At: number | null;
  rowStarts: [number, number][];
  ends: 'u32' | 'f64';
  domains: number;
  sizes: [number, number, number];
}

const sameKey = (a: ScanKey, b: ScanKey): boolean => JSON.stringify(a) === JSON.stringify(b);

export async function saveScan(path: string, key: ScanKey, scan: ScanResult, domains: readonly string[]): Promise<void> {
  const refs = Buffer.from(scan.rowRefs.view().buffer, scan.rowRefs.view().byteOffset, scan.rowRefs.view().byteLength);
  const endsView = scan.rowEnds.view();
  const ends = Buffer.from(endsView.buffer, endsView.byteOffset, endsView.byteLength);
  const text = Buffer.from(domains.join('\n'));
  const header: Header = {
    format: FORMAT,
    key,
    header: scan.header,
    headerless: scan.headerless,
    columnIndex: scan.columnIndex,
    rows: scan.rows,
    invalidRows: scan.invalidRows,
    headerRange: scan.headerRange,
    notUtf8At: scan.notUtf8At,
    rowStarts: [...scan.rowStarts],
    ends: endsView instanceof Float64Array ? 'f64' : 'u32',
    domains: domains.length,
    sizes: [refs.length, ends.length, text.length],
  };
  makeDirs(dirname(path), 0o700);
  const temp = `${path}.tmp-${process.pid}`;
  await writeFile(temp, Buffer.concat([Buffer.from(`${JSON.stringify(header)}\n`), refs, ends, text]), { mode: 0o600 });
  await rename(temp, path);
}

/** The cached scan for exactly this key, with its domains registered in `state` (which must be empty); else null. */
export async function loadScan(path: string, key: ScanKey, state: RunState): Promise<ScanResult | null> {
  if (state.domainCount !== 0) throw new Error('loadScan needs an empty state');
  let buf: Buffer;
  try {
    // Synchronous: nothing else runs meanwhile, and a thread-pool round trip would cost more than the read itself.
    buf = readFileSync(path);
  } catch {
    return null;
  }
  try {
    const nl = buf.indexOf(0x0a);
    const header = JSON.parse(buf.toString('utf8', 0, nl)) as Header;
    const [refBytes, endBytes, textBytes] = header.sizes;
    if (header.format !== FORMAT || !sameKey(header.key, key) || nl + 1 + refBytes + endBytes + textBytes !== buf.length) return null;
    let at = nl + 1;
    // ArrayBuffer.slice copies into fresh, aligned memory.
    const section = (n: number): ArrayBuffer => (buf.buffer as ArrayBuffer).slice(buf.byteOffset + at, buf.byteOffset + (at += n));
    const rowRefs = IntVector.of(new Int32Array(section(refBytes)));
    const rowEnds = IntVector.of(header.ends === 'f64' ? new Float64Array(section(endBytes)) : new Uint32Array(section(endBytes)));
    const domains = header.domains === 0 ? [] : buf.toString('utf8', at, at + textBytes).split('\n');
    if (rowRefs.length !== header.rows || rowEnds.length !== header.rows || domains.length !== header.domains) return null;
    for (const d of domains) state.addDomain(d);
    return {
      header: header.header,
      headerless: header.headerless,
      columnIndex: header.columnIndex,
      rows: header.rows,
      invalidRows: header.invalidRows,
      rowRefs,
      rowEnds,
      rowStarts: new Map(header.rowStarts),
      headerRange: header.headerRange,
      notUtf8At: header.notUtf8At,
    };
  } catch {
    await rm(path, { force: true });
    return null;
  }
}
