/**
 * `npm run check`: lint and type-check side by side (each is one process on one core), failing
 * when either fails, with each one's output shown whole once it is done.
 */
import { spawn } from 'node:child_process';

const run = (script) =>
  new Promise((resolve) => {
    const child = spawn('npm', ['run', '--silent', script], { stdio: ['ignore', 'pipe', 'pipe'], shell: process.platform === 'win32' });
    let out = '';
    child.stdout.on('data', (c) => (out += c));
    child.stderr.on('data', (c) => (out += c));
    child.on('close', (code, signal) => resolve({ script, code: code ?? `signal ${signal}`, out }));
  });

const results = await Promise.all([run('lint'), run('typecheck')]);
for (const { script, code, out } of results) {
  process.stdout.write(`${script}: ${code === 0 ? 'ok' : `failed (${typeof code === 'number' ? `exit ${code}` : code})`}\n${out}`);
}
process.exitCode = results.some((r) => r.code !== 0) ? 1 : 0;
