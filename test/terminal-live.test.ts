import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../src/sandbox/index.js';
import { csvText, tempDir } from './helpers/cli.js';
import { startGate, type Gate } from './helpers/gate.js';
import { liveTerminal, type LiveTerminal } from './helpers/pty.js';
import { finalScreen } from './helpers/screen.js';

const KEY = 'sk_test_terminal_live';
let sb: Sandbox;
let dir: ReturnType<typeof tempDir>;
let input: string;
let gate: Gate | undefined;
let live: LiveTerminal | undefined;
let runs = 0;

beforeAll(async () => {
  sb = await startSandbox({ keys: [{ key: KEY }] });
  dir = tempDir();
  const domains = [...sb.directory].slice(0, 60).map((c) => c.domain);
  input = dir.file('in.csv', csvText([['domain'], ...domains.map((d) => [d]), ['nobody-here.com']]));
});
afterEach(() => live?.kill());
afterAll(async () => {
  await gate?.close();
  await sb.close();
  dir.cleanup();
});

/** A run whose requests pass only as the test allows (`allowed` at first). */
async function gatedRun(columns: number, allowed: number, target = sb.url, free?: (path: string) => boolean, over?: 'hold' | 'refuse'): Promise<LiveTerminal> {
  await gate?.close();
  gate = await startGate(target, allowed, free, over);
  const n = runs++;
  const args = [input, '-o', dir.file(`out${n}.csv`), '--store', dir.file(`run${n}.db`), '--concurrency', '2'];
  live = liveTerminal(args, { ENRICH_BASE_URL: gate.url, ENRICH_API_KEY: KEY }, columns, dir.file(`tty${n}`));
  return live;
}

const lineOf = (screen: string[], label: string): string | undefined => screen.find((l) => l.startsWith(` ${label}`));
/** Every field after the counts is one of these, whole: a cut word would match none. */
const FIELD = /^(\d[\d,]* credits?|\d[\d,]* retry|\d[\d,]* retries|\d[\d,]*\/s|ETA (–|\d+[smh][\dms]*)|done|paused (\d+[smh][\dms]*) \(rate limited\))$/;
function expectWholeFields(line: string | undefined, columns: number): void {
  expect(line).toBeDefined();
  expect((line as string).length).toBeLessThan(columns - 2);
  const [, ...fields] = (line as string).split(' · ');
  for (const f of fields) expect(f).toMatch(FIELD);
}

describe('the live display, driven by progress', () => {
  it('marks the enriching total as still growing and never fills the bar while matching goes on', async () => {
    // Paid calls pass freely; matches only as allowed (the others get a 429, so none holds a slot).
    const t = await gatedRun(120, 0, sb.url, (path) => path.includes('/company/enrich'), 'refuse');
    // Nothing answered yet: the bars appear, the total to enrich is not known.
    const first = await t.waitForScreen((s) => lineOf(s, 'enriching') !== undefined);
    expect(lineOf(first, 'enriching')).toMatch(/ 0\/0\+ · 0 credits/);
    // Ten matches: every company found so far gets bought, while 51 domains are still to match.
    gate?.allow(10);
    const mid = await t.waitForScreen((s) => {
      const m = /^ enriching [█░]+ (\d+)\/(\d+)\+/.exec(lineOf(s, 'enriching') ?? '');
      return m !== null && Number(m[1]) > 0 && m[1] === m[2];
    });
    expect(lineOf(mid, 'matching')).toMatch(/ \d+\/61 /);
    expect(lineOf(mid, 'enriching')).toMatch(/░/);
    // The 429s that kept matching back have the client backing off: stop here rather than wait it out.
    t.type('\x03');
    expect(await t.exited).toBe(130);
  });

  it('lays out at 60 columns by dropping whole fields; redraws on resize, no stale frame', async () => {
    const t = await gatedRun(60, 6);
    const narrow = await t.waitForScreen((s) => lineOf(s, 'enriching') !== undefined && lineOf(s, 'matching') !== undefined);
    for (const label of ['matching', 'enriching']) expectWholeFields(lineOf(narrow, label), 60);
    // Wider: the bar grows past its 10-character minimum.
    let mark = t.output().length;
    t.resize(120);
    await t.redrawn((frame) => /[█░]{11,}/.test(frame));
    await t.waitForScreen((s) => /[█░]{11,}/.test(lineOf(s, 'matching') ?? ''), mark);
    // Narrower than before: the frame the terminal rewrapped is erased whole and redrawn.
    mark = t.output().length;
    t.resize(40);
    // A frame laid out for 40 columns: its first line whole (a newline after it), and shorter.
    await t.redrawn((frame) => /^ matching [^\n]{0,37}\n/.test(frame));
    const tight = await t.waitForScreen((s) => {
      const l = lineOf(s, 'enriching');
      return l !== undefined && l.length < 38 && s.filter((x) => /[█░]|matching|enriching/.test(x)).length === 2;
    }, mark);
    for (const label of ['matching', 'enriching']) expectWholeFields(lineOf(tight, label), 40);
    gate?.open();
    expect(await t.exited).toBe(0);
    const screen = finalScreen(t.output(), 60, t.resizes);
    expect(screen[0]).toBe('enrich: done');
    expect(screen.join('\n')).not.toMatch(/[█░]|matching|enriching/);
  });

  // tmux pushes a screen cleared that way from its top row into scrollback, on every redraw.
  it('redraws row by row, never erasing to the end of the screen', async () => {
    const t = await gatedRun(80, 4);
    // Several redraws, each after more answers: progress, not time.
    for (let step = 1; step <= 3; step++) {
      const mark = t.output().length;
      gate?.allow(4);
      await t.waitForScreen((s) => lineOf(s, 'matching') !== undefined, mark);
    }
    gate?.open();
    expect(await t.exited).toBe(0);
    // ED in any form (erase below, the whole screen, the scrollback): none.
    expect(t.output()).not.toMatch(new RegExp(`${String.fromCharCode(27)}\\[[0-3]?J`));
    expect(finalScreen(t.output(), 80)[0]).toBe('enrich: done');
  });

  it('Ctrl-C erases the display, says so once, and every line breaks between words', async () => {
    const t = await gatedRun(60, 4);
    await t.waitForScreen((s) => lineOf(s, 'enriching') !== undefined);
    t.type('\x03');
    await t.waitForScreen((s) => s.some((l) => l.startsWith('enrich: Ctrl-C: stopping')));
    gate?.open();
    expect(await t.exited).toBe(130);
    const screen = finalScreen(t.output(), 60);
    const text = screen.join('\n');
    expect(text).not.toMatch(/[█░]|\^C|enriching|matching/);
    expect(text.match(/interrupted/g)).toHaveLength(1);
    expect(text).toContain('Ctrl-C again quits at once');
    // No row reached the edge, where the terminal itself would have cut a word.
    for (const l of screen) expect(l.length, l).toBeLessThan(60);
    expect(screen.some((l) => l.startsWith('enrich: everything bought is kept in the store'))).toBe(true);
  });
});

describe('a rate-limit pause', () => {
  it('counts down in whole seconds rounded up: never "paused 0s"', async () => {
    // The service's clock stands still until released: after the burst every call is a 429.
    let frozen = true;
    const limited = await startSandbox({ keys: [{ key: KEY }], rateLimit: 1_000, burst: 8, now: () => (frozen ? 0 : performance.now()) });
    try {
      const t = await gatedRun(120, Number.POSITIVE_INFINITY, limited.url);
      const paused = await t.waitForScreen((s) => /paused/.test(s.join('\n')));
      expect(paused.join('\n')).toMatch(/ · paused [1-9]\d*s \(rate limited\)/);
      frozen = false;
      expect(await t.exited).toBe(0);
      expect(t.output()).not.toMatch(/paused 0s/);
    } finally {
      await limited.close();
    }
  });
});
