import { defineConfig } from 'vitest/config';
import suite from '../../vitest.config.js';

/** The suite's own configuration (its PostgreSQL included), over the canary alone: nothing merged into include. */
export default defineConfig({ test: { ...suite.test, include: ['test/canary/*.canary.ts'] } });
