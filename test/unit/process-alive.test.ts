import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { isProcessAlive } from '../../src/process-alive.js';

const state = (pid: number): string => {
  const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
  return stat.charAt(stat.lastIndexOf(')') + 2);
};

describe('isProcessAlive', () => {
  it('says a running process is alive and a missing one is not', () => {
    expect(isProcessAlive(process.pid)).toBe(true);
    expect(isProcessAlive(2 ** 22 + 1)).toBe(false);
  });

  // A dead run nobody reaped (its parent is busy, or a container's PID 1 reaps nothing) must not
  // hold its purchases from other runs as if it were alive.
  it.runIf(process.platform === 'linux')('says a zombie, dead but not yet reaped, is not alive', async () => {
    // sh starts a child, then becomes `sleep`, which never reaps it. The child exits only once
    // that has happened (by progress: sh, still itself, could reap a child that exits sooner).
    const script = 'p=$$; (while [ "$(cat /proc/$p/comm)" != sleep ]; do sleep 0.01; done) & echo $!; exec sleep 60';
    const parent = spawn('sh', ['-c', script], { stdio: ['ignore', 'pipe', 'ignore'] });
    try {
      const pid = Number(await new Promise<string>((resolve) => parent.stdout.once('data', (b: Buffer) => resolve(b.toString()))));
      while (state(pid) !== 'Z') await new Promise((r) => setTimeout(r, 5));
      expect(isProcessAlive(pid)).toBe(false);
    } finally {
      parent.kill('SIGKILL');
    }
  });
});
