import type { Progress } from '../pipeline/progress.js';

const nf = new Intl.NumberFormat('en-US');
export const num = (n: number): string => nf.format(n);

export function duration(ms: number): string {
  if (ms < 10_000) return `${(Math.max(0, ms) / 1000).toFixed(1)}s`;
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(m / 60)}h${String(m % 60).padStart(2, '0')}m`;
}

/** One line of where the run is, for logs: `matching 1,200/5,000 · enriching 300/800 · 300 credits`. */
export function progressLine(p: Progress, now: number): string {
  const parts: string[] = [];
  if (p.phase === 'scan') parts.push(`reading input: ${num(p.rows)} rows`);
  else if (p.phase === 'write') parts.push('writing results');
  else {
    parts.push(`matched ${num(p.matchDone)}/${num(p.matchTotal)}`);
    if (p.enrichTotal > 0) parts.push(`enriched ${num(p.enrichDone)}/${num(p.enrichTotal)}`);
    parts.push(`${num(p.credits)} credits`);
    if (p.pausedUntil > now) parts.push(`paused ${duration(p.pausedUntil - now)} (rate limited)`);
  }
  return parts.join(' · ');
}
