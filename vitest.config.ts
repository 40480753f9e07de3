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
    // Integration tests spawn the CLI and a sandbox per file; two cores, so keep the pool small.
    maxWorkers: 2,
  },
});
