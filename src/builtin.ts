import { createRequire } from 'node:module';

const requireHere = createRequire(import.meta.url);

/**
 * A built-in module loaded where it is first needed (node:crypto only to hash, worker_threads
 * only when a run writes), without `import()`: the bundle is compiled from V8's code cache
 * (cli/code-cache.ts), which gives it no ES module loader, and a synchronous load is as lazy.
 */
export function builtin<T>(name: `node:${string}`): T {
  return requireHere(name) as T;
}
