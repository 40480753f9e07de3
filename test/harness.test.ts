import { spawnSync } from 'node:child_process';
import { expect, it } from 'vitest';

it('a failing test fails the run, the suite’s PostgreSQL started and stopped', () => {
  const env: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0' };
  delete env['ENRICH_TEST_POSTGRES_URL']; // the harness starts a server of its own, as on a fresh machine
  const run = spawnSync(process.execPath, ['node_modules/vitest/vitest.mjs', 'run', '--config', 'test/canary/vitest.config.ts'], { encoding: 'utf8', env, timeout: 170_000 });
  // It failed where the canary fails on purpose, after its query on the harness's server worked.
  expect(run.stdout + run.stderr).toContain('expected 2 to be 3');
  expect(run.stdout + run.stderr).toMatch(/Tests\s+1 failed/);
  expect(run.status).toBe(1);
});
