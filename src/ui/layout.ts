/** The live display's lines at the terminal's current width: a narrow terminal loses whole fields, least useful first, never half a word. */
import cliProgress from 'cli-progress';

export interface BarLine {
  /** Always shown, padded so that the bars line up. */
  label: string;
  /** Always shown: `280/284`, or `280/284+` while the total is still growing. */
  counts: string;
  /** 0..1, how full the bar is. */
  fraction: number;
  /** Optional fields, most important first; dropped from the end when the line does not fit. */
  extras: readonly string[];
}

export const MIN_BAR = 10;
export const MAX_BAR = 30;
/** Columns left free at the right: the terminal echoes ^C at the cursor, and a line reaching the last column would wrap it onto an unknown row. */
export const RIGHT_MARGIN = 3;

// A CommonJS module: its members come from the default export.
const { Format, Presets } = cliProgress;
const { barCompleteChar, barIncompleteChar } = Presets.shades_classic;

/** The bar is cli-progress's, but not its terminal handling: it counts lines at the width drawn, leaving stale rows after a shrink (frame.ts counts at the current width). */
export function bar(width: number, fraction: number): string {
  return Format.BarFormat(Math.min(1, Math.max(0, fraction)), {
    barsize: width,
    barCompleteString: barCompleteChar.repeat(width),
    barIncompleteString: barIncompleteChar.repeat(width),
    barGlue: '',
  });
}

const SEP = ' · ';

/** ` label [bar] counts · extra · extra`, at most `columns - RIGHT_MARGIN` wide, the bar at most `maxBar`. */
export function layoutLine(line: BarLine, columns: number, maxBar = MAX_BAR): string {
  const room = Math.max(0, columns - RIGHT_MARGIN);
  const head = ` ${line.label}`;
  let fixed = `${head} ${line.counts}`.length;
  if (fixed > room) return ` ${line.counts}`.slice(0, room);
  // The bar first, at its smallest; then the fields in order of importance; then a wider bar.
  const withBar = fixed + MIN_BAR + 1 <= room;
  if (withBar) fixed += MIN_BAR + 1;
  const extras: string[] = [];
  for (const extra of line.extras) {
    if (fixed + SEP.length + extra.length > room) break;
    extras.push(extra);
    fixed += SEP.length + extra.length;
  }
  const width = withBar ? Math.max(MIN_BAR, Math.min(maxBar, MAX_BAR, MIN_BAR + room - fixed)) : 0;
  const tail = extras.length > 0 ? `${SEP}${extras.join(SEP)}` : '';
  return withBar ? `${head} ${bar(width, line.fraction)} ${line.counts}${tail}` : `${head} ${line.counts}${tail}`;
}

/** Several lines, their bars one width (the narrowest any line can afford), so they line up. */
export function layoutLines(lines: readonly BarLine[], columns: number): string[] {
  const widths = lines.map((l) => barWidth(layoutLine(l, columns))).filter((w) => w > 0);
  const shared = widths.length > 0 ? Math.min(...widths) : MAX_BAR;
  return lines.map((l) => layoutLine(l, columns, shared));
}

const barWidth = (text: string): number => /[█░]+/.exec(text)?.[0].length ?? 0;

/** Rows a line of `length` characters takes at `columns` (a terminal wraps what is longer). */
export const rowsFor = (length: number, columns: number): number => (columns <= 0 ? 1 : Math.max(1, Math.ceil(length / columns)));
