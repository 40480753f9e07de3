import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    setupFiles: ['test/helpers/setup.ts'],
    // One PostgreSQL server for the run (or ENRICH_TEST_POSTGRES_URL's): the team store's half of the suite.
    globalSetup: ['test/helpers/postgres-server.ts'],
    exclude: ['test/bench/**', 'node_modules/**'],
    // A guard against a hang, not a deadline: no verdict may depend on how fast the machine is.
    testTimeout: 180_000,
    hookTimeout: 180_000,
    // Most files wait on processes they spawn (the CLI, PostgreSQL, the sandbox) more than they
    // compute: four at once on two cores with a CPU burner on one took the suite from 492 s to
    // 383 s (six: 372 s).
    maxWorkers: 4,
    // Files share their worker's module graph instead of loading it afresh each (a sixth of the
    // suite's CPU). Tests restore what they change (fake timers, env); each gets its own state dir.
    isolate: false,
  },
});
