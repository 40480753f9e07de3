import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../src/sandbox/index.js';
import { csvText, runCli, tempDir } from './helpers/cli.js';
import { runProcess } from './helpers/spawn.js';
import { liveTerminal } from './helpers/pty.js';
import { finalScreen } from './helpers/screen.js';

/** Issue 22's polish list, each as the walk-through met it, as a process. */
const KEY = 'sk_test_polish_0123456';
let sb: Sandbox;
let dir: ReturnType<typeof tempDir>;
beforeAll(async () => {
  sb = await startSandbox({ keys: [{ key: KEY }] });
  dir = tempDir();
});
afterAll(async () => {
  await sb.close();
  dir.cleanup();
});
const env = { ENRICH_BASE_URL: '', ENRICH_API_KEY: '' };

describe('doctor', () => {
  it('reports every missing setting at once, not only the first', async () => {
    const r = await runCli(['doctor', '--store', dir.file('none.db')], { env });
    expect(r.code).toBe(2);
    expect(r.stdout).toMatch(/\n? {2}address +FIX +no service address/);
    expect(r.stdout).toMatch(/\n {2}key +FIX +.*ENRICH_API_KEY/);
    expect(r.stdout).toContain('enrich doctor: 2 to fix');
  });

  it('sizes a store as `enrich ledger` does', async () => {
    const store = dir.file('sized.db');
    const input = dir.file('in.csv', csvText([['domain'], ...[...sb.directory].slice(0, 3).map((c) => [c.domain])]));
    // As processes: a store an in-process run closed stays open until collected (libsql), and its write-ahead log, counted in the
    // size, is folded in whenever that happens, between the two readings or not.
    expect((await runProcess([input, '-o', dir.file('o.csv'), '--store', store], { env: { ENRICH_BASE_URL: sb.url, ENRICH_API_KEY: KEY } })).code).toBe(0);
    const ledger = await runProcess(['ledger', '--store', store]);
    const doctor = await runProcess(['doctor', '--sandbox', '--store', store]);
    const fromLedger = /\(([\d.]+ [KMG]?i?B)\)/.exec(ledger.stdout)?.[1];
    expect(fromLedger, ledger.stdout).toBeDefined();
    expect(doctor.stdout).toContain(`${store} (${fromLedger as string}; SQLite's integrity check: ok)`);
  });
});

describe('ledger', () => {
  it('on a fresh machine says there is no store yet (exit 0), but refuses a named missing store', async () => {
    const fresh = dir.file('fresh-state');
    const r = await runCli(['ledger'], { env: { XDG_STATE_HOME: fresh, ENRICH_STORE: undefined } });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe(`store      ${join(fresh, 'enrich', 'store.db')} (none yet: the first batch run creates it)\n`);
    expect(existsSync(fresh)).toBe(false);
    expect((await runCli(['ledger', '--store', dir.file('typo.db')])).code).toBe(2);
  });
});

describe('the batch', () => {
  it('--quiet drops the dry run closing note too', async () => {
    const r = await runCli(['fixtures/companies.csv', '--sandbox', '--dry-run', '--quiet', '--store', dir.file('quiet.db')]);
    expect(r.code).toBe(0);
    expect(r.stderr).toBe('');
  });

  it('never creates a HOME that does not exist', async () => {
    const home = join(dir.path, 'no-such-home');
    // A process: HOME as the process has it, for anything that asks os.homedir().
    const r = await runProcess(['fixtures/companies.csv', '--sandbox'], { env: { HOME: home, XDG_STATE_HOME: undefined, ENRICH_STORE: undefined } });
    expect(r.code).toBe(2);
    expect(r.stderr).toBe(`enrich: the store ${home}/.local/state/enrich/sandbox.db: HOME (${home}) does not exist; set HOME to a folder that does, or give the store with --store\n`);
    expect(existsSync(home)).toBe(false);
  });
});

describe('the help', () => {
  it('keeps every line within 80 columns and names the defaults', async () => {
    for (const command of [[], ['ledger'], ['ledger', 'export'], ['sandbox'], ['doctor']]) {
      const r = await runCli([...command, '--help']);
      expect(r.code).toBe(0);
      for (const line of r.stdout.split('\n')) expect(line.length, `${command.join(' ')}: ${line}`).toBeLessThanOrEqual(80);
    }
    const help = (await runCli(['--help'])).stdout;
    expect(help).toMatch(/--miss-max-age <duration> [^]*?default 30d/);
    expect(help).not.toContain('cut -d,');
  });
});

describe('on a narrow terminal', () => {
  it.each([40, 25])('the summary at %i columns breaks between words, never inside one', async (columns) => {
    const store = dir.file(`narrow-${columns}.db`);
    const args = ['fixtures/companies.csv', '--sandbox', '--dry-run', '--store', store];
    // The same summary, unbroken, from a pipe: every word the terminal shows must be one of its words.
    const piped = await runCli(args);
    const words = new Set(piped.stderr.split(/\s+/));
    const live = liveTerminal(args, {}, columns, dir.file(`tty-narrow-${columns}`));
    try {
      expect(await live.exited).toBe(0);
      const screen = finalScreen(live.output(), columns);
      const from = screen.findIndex((l) => l.startsWith('enrich: dry run'));
      const summary = screen.slice(from, screen.findIndex((l, i) => i > from && l.startsWith('  elapsed')));
      expect(summary.length).toBeGreaterThan(10);
      for (const line of summary) {
        expect(line.length).toBeLessThanOrEqual(columns);
        for (const word of line.trim().split(/\s+/)) expect(words.has(word), `"${word}" in "${line}"`).toBe(true);
      }
    } finally {
      live.kill();
    }
  });
});

describe('a failed run', () => {
  it('leaves no stale --summary-json behind (exit 2 on a malformed input)', async () => {
    const summary = dir.file('yesterday.json', '{"status":"done"}\n');
    const bad = dir.file('bad.csv');
    writeFileSync(bad, 'domain\n"unterminated,quote\n');
    const r = await runCli([bad, '--sandbox', '--store', dir.file('stale.db'), '--summary-json', summary]);
    expect(r.code).toBe(2);
    expect(existsSync(summary)).toBe(false);
  });

  // The path it names may be the mistake.
  it('touches no file when the command line itself is refused', async () => {
    const summary = dir.file('kept.json', '{"status":"done"}\n');
    const r = await runCli([dir.file('in.csv', 'domain\nacme.com\n'), '--sandbox', '--no-such-flag', '--summary-json', summary]);
    expect(r.code).toBe(2);
    expect(readFileSync(summary, 'utf8')).toBe('{"status":"done"}\n');
  });
});

describe('a run with nothing to send', () => {
  // doctor still names the refused key (exit 5).
  it('does not contact the service: a wrong key exits 0 if the store answers every row', async () => {
    const input = dir.file('held.csv', csvText([['domain'], [[...sb.directory][0]?.domain ?? 'acme.com']]));
    const store = dir.file('held.db');
    const first = await runCli([input, '-o', dir.file('held.out.csv'), '--store', store], { env: { ENRICH_BASE_URL: sb.url, ENRICH_API_KEY: KEY } });
    expect(first.code, first.stderr).toBe(0);
    const requests = sb.stats.requests;
    const wrong = { ENRICH_BASE_URL: sb.url, ENRICH_API_KEY: 'sk_wrong_key_99999' };
    const again = await runCli([input, '-o', dir.file('held.out.csv'), '--store', store], { env: wrong });
    expect([again.code, sb.stats.requests]).toStrictEqual([0, requests]);
    const doctor = await runCli(['doctor', '--store', store], { env: wrong });
    expect(doctor.code).toBe(5);
  });
});

describe('typing the input at the terminal (`enrich -`)', () => {
  it('draws no spinner over what is typed; the display starts once the input ends', async () => {
    const live = liveTerminal(['-', '--sandbox', '--store', dir.file('typed.db'), '-o', dir.file('typed.csv')], {}, 80, dir.file('tty-typed'));
    try {
      await live.waitForScreen((s) => s.some((l) => l.includes('press Ctrl-D')));
      const before = live.output().length;
      live.type('domain\r');
      await live.waitForScreen((s) => s.some((l) => l === 'domain'), before);
      live.type('example-typed.com\r\x04');
      expect(await live.exited).toBe(0);
      const typedAt = live.output().indexOf('example-typed.com');
      // Nothing was drawn between the note and the end of the typing but the typing itself (no spinner frames).
      expect(live.output().slice(before, typedAt)).toBe('domain\r\n');
      expect(finalScreen(live.output(), 80)).toContain('example-typed.com');
    } finally {
      live.kill();
    }
  });
});
