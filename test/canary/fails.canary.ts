import { expect, it } from 'vitest';
import { freshDatabase, sql } from '../helpers/postgres.js';

// Run only by test/harness.test.ts, through the suite's own set-up: a test that fails must fail the run.
it('uses the harness PostgreSQL, then fails on purpose', async () => {
  const rows = await sql<{ one: number }>(await freshDatabase(), 'SELECT 1 AS one');
  expect(rows[0]?.one).toBe(1);
  expect(1 + 1).toBe(3);
});
