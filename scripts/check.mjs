/**
 * `npm run check`: lint and type-check side by side (each is one process on one core), failing
 * when either fails, with each one's output shown whole once it is done.
 */
import { spawn } from 'node:child_process';

const run = (script) =>
  new Promise((resolve) => {
    const child = spawn(process.platform === 'win32' ? 'npm.cmd' : 'npm', ['run', '--silent', script], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (c) => (out += c));
    child.stderr.on('data', (c) => (out += c));
    child.on('close', (code) => resolve({ script, code: code ?? 1, out }));
  });

const results = await Promise.all([run('lint'), run('typecheck')]);
for (const { script, code, out } of results) {
  process.stdout.write(`${script}: ${code === 0 ? 'ok' : `failed (exit ${code})`}\n${out}`);
}
process.exitCode = results.some((r) => r.code !== 0) ? 1 : 0;
