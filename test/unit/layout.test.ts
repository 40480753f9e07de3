import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { Progress } from '../../src/pipeline/progress.js';
import { countdown, progressLine, wrapWords } from '../../src/ui/format.js';
import { LiveFrame } from '../../src/ui/frame.js';
import { layoutLine, layoutLines, MAX_BAR, MIN_BAR, RIGHT_MARGIN, type BarLine } from '../../src/ui/layout.js';
import { enrichLine } from '../../src/ui/tty.js';
import { finalScreen } from '../helpers/screen.js';

const line: BarLine = { label: 'enriching', counts: '280/284+', fraction: 0.5, extras: ['280 credits', '10 retries', '37/s'] };
const barOf = (s: string): string => /[█░]+/.exec(s)?.[0] ?? '';

describe('layoutLine', () => {
  it('fits everything at 120 columns, with the widest bar', () => {
    expect(layoutLine(line, 120)).toBe(` enriching ${'█'.repeat(15)}${'░'.repeat(15)} 280/284+ · 280 credits · 10 retries · 37/s`);
    expect(barOf(layoutLine(line, 120))).toHaveLength(MAX_BAR);
  });

  it('drops whole fields from the least important end as the width shrinks, never cutting one', () => {
    for (let columns = 20; columns <= 120; columns++) {
      const out = layoutLine(line, columns);
      expect(out.length, `${columns}: ${out}`).toBeLessThanOrEqual(columns - RIGHT_MARGIN);
      const fields = out.split(' · ').slice(1);
      expect(line.extras.slice(0, fields.length)).toEqual(fields);
    }
    expect(layoutLine(line, 60)).toBe(` enriching ${barOf(layoutLine(line, 60))} 280/284+ · 280 credits · 10 retries`);
    // At 40 the credits no longer fit; the room they leave goes to the bar.
    expect(layoutLine(line, 40)).toMatch(/^ enriching [█░]{17} 280\/284\+$/);
    for (let columns = 33; columns <= 120; columns++) expect(barOf(layoutLine(line, columns)).length).toBeGreaterThanOrEqual(MIN_BAR);
    // Too narrow for a bar: the counts still show.
    expect(layoutLine(line, 28)).toBe(' enriching 280/284+');
  });
});

describe('layoutLines', () => {
  it('gives every bar the narrowest width any line can afford, so they line up', () => {
    const match: BarLine = { label: 'matching ', counts: '42/144', fraction: 0.3, extras: ['paused 1s (rate limited)'] };
    const [a = '', b = ''] = layoutLines([match, line], 60);
    expect(barOf(a)).toHaveLength(barOf(b).length);
    expect(a.indexOf(barOf(a))).toBe(b.indexOf(barOf(b)));
    expect(a).toContain('paused 1s (rate limited)');
  });
});

describe('enrichLine', () => {
  const r = { at: 0, done: 0, perSecond: 0 };
  it('marks a total that is still growing, and measures the bar against the projected total', () => {
    const p = Object.assign(new Progress(), { phase: 'match', matchTotal: 500, matchDone: 284, enrichTotal: 284, enrichDone: 280 });
    const growing = enrichLine(p, r, null);
    expect(growing.counts).toBe('280/284+');
    expect(growing.fraction).toBeCloseTo(280 / 500, 5);
    const done = enrichLine(Object.assign(p, { matchDone: 500, enrichTotal: 290 }), r, null);
    expect(done.counts).toBe('280/290');
    expect(done.fraction).toBeCloseTo(280 / 290, 5);
  });
});

describe('progressLine, for logs', () => {
  it('marks a growing enrich total and rounds a pause up', () => {
    const p = Object.assign(new Progress(), { phase: 'match', matchTotal: 500, matchDone: 284, enrichTotal: 284, enrichDone: 280, credits: 280, pausedUntil: 1_200 });
    expect(progressLine(p, 1_000)).toBe('matched 284/500 · enriched 280/284+ · 280 credits · paused 1s (rate limited)');
    expect(progressLine(Object.assign(p, { matchDone: 500 }), 2_000)).toBe('matched 500/500 · enriched 280/284 · 280 credits');
    expect(progressLine(Object.assign(p, { enrichDone: 1, credits: 1 }), 2_000)).toBe('matched 500/500 · enriched 1/284 · 1 credit');
  });

  it('says what a run waits on while another run holds its companies, until none waits', () => {
    const p = Object.assign(new Progress(), { phase: 'match', matchTotal: 10, matchDone: 10, enrichTotal: 10, enrichDone: 7, credits: 7 });
    p.apply({ type: 'waiting', by: 1, run: 'pid 4242' });
    p.apply({ type: 'waiting', by: 1 });
    expect(progressLine(p, 0)).toBe('matched 10/10 · enriched 7/10 · 7 credits · waiting for another run (pid 4242) to finish 2 companies');
    expect(enrichLine(p, { at: 0, done: 0, perSecond: 0 }, null).extras).toContain('waiting for another run (pid 4242) to finish 2 companies');
    p.apply({ type: 'waiting', by: -1 });
    p.apply({ type: 'waiting', by: -1 });
    expect(progressLine(p, 0)).toBe('matched 10/10 · enriched 7/10 · 7 credits');
  });
});

describe('countdown and wrapWords', () => {
  it('rounds a pause up, so one still on never reads 0s', () => {
    expect(countdown(1)).toBe('1s');
    expect(countdown(999)).toBe('1s');
    expect(countdown(1001)).toBe('2s');
    expect(countdown(0)).toBe('1s');
    expect(countdown(61_000)).toBe('1m01s');
  });
  it('breaks at spaces, indents what follows, and keeps a long word whole', () => {
    expect(wrapWords('enrich: the journal is saved in /a/very/long/path/to/it.journal; run it again', 30)).toBe(
      'enrich: the journal is saved\n  in\n  /a/very/long/path/to/it.journal;\n  run it again',
    );
    expect(wrapWords('short', 30)).toBe('short');
    expect(wrapWords('no width known', 0)).toBe('no width known');
  });
});

describe('LiveFrame', () => {
  function terminal(columns: number): { stream: PassThrough & { columns: number }; text: () => string } {
    const stream = Object.assign(new PassThrough(), { columns });
    let text = '';
    stream.on('data', (c: Buffer) => (text += c.toString('utf8')));
    return { stream, text: () => text };
  }

  it('redraws in place, prints above itself, and leaves nothing when cleared', () => {
    const t = terminal(80);
    t.stream.write('before\n');
    const frame = new LiveFrame(t.stream);
    frame.draw(['one', 'two']);
    frame.draw(['three', 'four']);
    expect(finalScreen(t.text(), 80)).toEqual(['before', 'three', 'four']);
    frame.printAbove('a note');
    expect(finalScreen(t.text(), 80)).toEqual(['before', 'a note', 'three', 'four']);
    frame.clear();
    t.stream.write('summary\n');
    expect(finalScreen(t.text(), 80)).toEqual(['before', 'a note', 'summary']);
  });

  it('erases the rows a reflowing terminal made of its lines after a shrink', () => {
    const t = terminal(60);
    t.stream.write('before\n');
    const frame = new LiveFrame(t.stream);
    frame.draw(['x'.repeat(55), 'y'.repeat(55)]);
    const at = t.text().length;
    t.stream.columns = 40;
    frame.draw(['short', 'lines']);
    expect(finalScreen(t.text(), 60, [{ at, columns: 40 }])).toEqual(['before', 'short', 'lines']);
    frame.clear();
    expect(finalScreen(t.text(), 60, [{ at, columns: 40 }])).toEqual(['before']);
  });
});
