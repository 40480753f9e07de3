import { afterEach, beforeEach } from 'vitest';
import { startSandbox, type Sandbox, type SandboxOptions } from '../../src/sandbox/index.js';
import { tempDir } from './cli.js';

export interface SandboxSuite {
  /** The sandbox the test started (set by `sandbox()`). */
  sb: Sandbox;
  /** Whether this test has started its sandbox yet (tests that start it once, on first use). */
  readonly started: boolean;
  /** A temp folder of the test's own, removed after it. */
  dir: ReturnType<typeof tempDir>;
  /** Starts a sandbox that accepts `key`, closed after the test. */
  sandbox(options?: SandboxOptions): Promise<Sandbox>;
  /** The environment a CLI run against that sandbox needs. */
  env(extra?: Record<string, string>): Record<string, string>;
}

/** What a file of tests against a sandbox sets up for each test, and takes down after it. */
export function sandboxSuite(key: string): SandboxSuite {
  let current: Sandbox | undefined;
  const suite: SandboxSuite = {
    get sb(): Sandbox {
      if (current === undefined) throw new Error('start the sandbox first: await t.sandbox()');
      return current;
    },
    get started(): boolean {
      return current !== undefined;
    },
    dir: undefined as unknown as ReturnType<typeof tempDir>,
    sandbox: async (options = {}) => (current = await startSandbox({ keys: [{ key }], ...options })),
    env: (extra = {}) => ({ ENRICH_BASE_URL: suite.sb.url, ENRICH_API_KEY: key, ...extra }),
  };
  beforeEach(() => {
    suite.dir = tempDir();
  });
  afterEach(async () => {
    await current?.close();
    current = undefined;
    suite.dir.cleanup();
  });
  return suite;
}
