import { spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../src/sandbox/index.js';
import { csvText, readCsvFile, tempDir } from './helpers/cli.js';
import { finalScreen } from './helpers/screen.js';
import { BIN, runProcess } from './helpers/spawn.js';
import { baseEnv } from './helpers/setup.js';

const KEY = 'sk_test_terminal';
let sb: Sandbox;
let dir: ReturnType<typeof tempDir>;
let input: string;

beforeAll(async () => {
  // Slow enough (a rate limit, some latency) that the run lasts a couple of seconds.
  sb = await startSandbox({ keys: [{ key: KEY }], latencyMs: 40 });
  dir = tempDir();
  const domains = [...sb.directory].slice(0, 60).map((c) => c.domain);
  input = dir.file('in.csv', csvText([['domain'], ...domains.map((d) => [d]), ['nobody-here.com']]));
});
afterAll(async () => {
  await sb.close();
  dir.cleanup();
});

/** Runs the CLI inside a pseudo-terminal (util-linux `script`), returning everything it drew. */
function inTerminal(args: string[], env: Record<string, string> = {}, columns = 120): Promise<{ code: number; output: string }> {
  const command = `stty cols ${columns} rows 40 2>/dev/null; exec ${JSON.stringify(process.execPath)} ${[BIN, ...args].map((a) => JSON.stringify(a)).join(' ')}`;
  return new Promise((resolve, reject) => {
    const child = spawn('script', ['-qfec', command, '/dev/null'], {
      env: { ...baseEnv(), TERM: 'xterm-256color', ENRICH_BASE_URL: sb.url, ENRICH_API_KEY: KEY, ...env },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (c: Buffer) => (output += c.toString('utf8')));
    child.stderr.on('data', (c: Buffer) => (output += c.toString('utf8')));
    child.on('error', reject);
    child.on('exit', (code) => resolve({ code: code ?? -1, output }));
  });
}

describe('the terminal experience', () => {
  it('shows a spinner then progress bars on a terminal, and clears them cleanly at the end', async () => {
    const out = dir.file('tty.csv');
    const { code, output } = await inTerminal([input, '-o', out, '--fresh', '--concurrency', '2']);
    expect(code, output).toBe(0);
    // While running: the bars, with counts and credits, drawn with cursor movement.
    expect(output).toMatch(/matching .*[█░]+.* \d+\/61/);
    expect(output).toMatch(/enriching .*[█░]+.*\d+ credits/);
    expect(output).toContain('\x1b[');
    // At the end: no bar left on screen, the summary in place, the cursor given back.
    const screen = finalScreen(output);
    expect(screen.join('\n')).not.toMatch(/[█░]|matching|reading input/);
    expect(screen[0]).toBe('enrich: done');
    expect(screen).toContainEqual(expect.stringMatching(/^ {2}credits spent +60 /));
    expect(output.lastIndexOf('\x1b[?25h')).toBeGreaterThan(output.lastIndexOf('\x1b[?25l'));
    expect(readCsvFile(out)).toHaveLength(61);
  });

  it('writes no escape sequences when piped, in CI, with ENRICH_PROGRESS=0 or --no-progress', async () => {
    const piped = await runProcess([input, '-o', dir.file('piped.csv'), '--fresh'], { env: { ENRICH_BASE_URL: sb.url, ENRICH_API_KEY: KEY } });
    expect(piped.code).toBe(0);
    expect(piped.stderr).not.toContain('\x1b');
    expect(piped.stderr).toContain('enrich: done');
    for (const [env, flags] of [[{ CI: 'true' }, []], [{ ENRICH_PROGRESS: '0' }, []], [{}, ['--no-progress']]] as const) {
      const { code, output } = await inTerminal([input, '-o', dir.file('plain.csv'), '--fresh', ...flags], env);
      expect(code, output).toBe(0);
      expect(output).not.toContain('\x1b');
      expect(output).toContain('enrich: done');
    }
  });

  it('NO_COLOR drops colour only; --progress or ENRICH_PROGRESS=1 shows the display under CI', async () => {
    for (const [env, flags] of [[{ NO_COLOR: '1' }, []], [{ CI: 'true', ENRICH_PROGRESS: '1' }, []], [{ CI: 'true' }, ['--progress']]] as const) {
      const { code, output } = await inTerminal([input, '-o', dir.file('live.csv'), '--fresh', '--concurrency', '2', ...flags], env);
      expect(code, output).toBe(0);
      expect(output).toMatch(/matching .*[█░]+/);
      expect(output).toContain('\x1b[');
      // NO_COLOR takes the colour (SGR colour codes) out of the spinner, and nothing else.
      // eslint-disable-next-line no-control-regex -- an SGR colour sequence is what is looked for
      if ('NO_COLOR' in env) expect(output).not.toMatch(/\x1b\[3\d(;\d+)*m/);
    }
  });

  it('keeps stdout for data: results on a terminal come after the display is gone', async () => {
    const { code, output } = await inTerminal([input, '--fresh']);
    expect(code).toBe(0);
    const screen = finalScreen(output);
    expect(screen[0]).toMatch(/^domain,enrich_status,/);
    expect(screen.filter((l) => /,matched,/.test(l))).toHaveLength(60);
    expect(screen.join('\n')).not.toMatch(/[█░]/);
  });

  it('falls back to plain lines on a terminal that reports no width', async () => {
    const { code, output } = await inTerminal([input, '-o', dir.file('zero.csv'), '--fresh'], {}, 0);
    expect(code).toBe(0);
    expect(output).not.toContain('\x1b');
    expect(output.length).toBeLessThan(10_000);
  });

  it('--quiet prints nothing but what needs acting on', async () => {
    const { code, output } = await inTerminal([input, '-o', dir.file('quiet.csv'), '--fresh', '--quiet']);
    expect(code).toBe(0);
    expect(output.trim()).toBe('');
  });
});
