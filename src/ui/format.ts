import type { Progress } from '../pipeline/progress.js';

// Counts are whole numbers: grouping them by hand spares building an Intl formatter at start-up.
let nf: Intl.NumberFormat | undefined;
export const num = (n: number): string =>
  Number.isSafeInteger(n) ? String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ',') : (nf ??= new Intl.NumberFormat('en-US')).format(n);

/** `1 credit`, `2 credits`, `1,200 companies`: a count with its noun. */
export const count = (n: number, one: string, many = `${one}s`): string => `${num(n)} ${n === 1 ? one : many}`;

export function duration(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(m / 60)}h${String(m % 60).padStart(2, '0')}m`;
}

/** How long a run took: tenths of a second while that still says something. */
export const elapsed = (ms: number): string => (ms < 10_000 ? `${(Math.max(0, ms) / 1000).toFixed(1)}s` : duration(ms));

/** Time left on a wait, rounded up: a pause that is still on never reads "0s". */
export const countdown = (ms: number): string => duration(Math.ceil(Math.max(1, ms) / 1000) * 1000);

/** Breaks a message at spaces so no line is wider than `columns` (a terminal would cut mid-word); continuations indented, an over-long word (a path) kept whole. */
export function wrapWords(text: string, columns: number, indent = '  '): string {
  if (columns <= 0 || text.length <= columns) return text;
  const lines: string[] = [];
  let line = '';
  for (const word of text.split(' ')) {
    const candidate = line === '' ? word : `${line} ${word}`;
    if (candidate.length <= columns || line.trim() === '') line = candidate;
    else {
      lines.push(line);
      line = `${indent}${word}`;
    }
  }
  lines.push(line);
  return lines.join('\n');
}

/** `waiting for another run (pid 4242) to finish 3 companies`, or null when nothing waits. */
export function waitingText(p: Progress): string | null {
  if (p.waiting <= 0) return null;
  return `waiting for another run${p.waitingOn === '' ? '' : ` (${p.waitingOn})`} to finish ${count(p.waiting, 'company', 'companies')}`;
}

/** `paused 3s (rate limited)` while the flow holds every request back, else null. */
export function pausedText(p: Progress, now: number): string | null {
  return p.pausedUntil > now ? `paused ${countdown(p.pausedUntil - now)} (rate limited)` : null;
}

/** One line of where the run is, for logs: `matching 1,200/5,000 · enriching 300/800 · 300 credits`. */
export function progressLine(p: Progress, now: number): string {
  const parts: string[] = [];
  if (p.phase === 'scan') parts.push(`reading input: ${num(p.rows)} rows`);
  else if (p.phase === 'write') parts.push('writing results');
  else {
    parts.push(`matched ${num(p.matchDone)}/${num(p.matchTotal)}`);
    // `+`: the total grows until every domain is matched (as on the live display).
    if (p.enrichTotal > 0) parts.push(`enriched ${num(p.enrichDone)}/${num(p.enrichTotal)}${p.matchDone < p.matchTotal ? '+' : ''}`);
    parts.push(count(p.credits, 'credit'));
    for (const text of [pausedText(p, now), waitingText(p)]) if (text !== null) parts.push(text);
  }
  return parts.join(' · ');
}
