import { createRequire } from 'node:module';

const requireHere = createRequire(import.meta.url);

/**
 * A built-in module loaded where it is first needed, without `import()`: the bundle is compiled
 * from V8's code cache (cli/code-cache.ts), which gives it no ES module loader. Loading the
 * built-ins up front instead cost nothing measurable (a rerun's CPU 1.006x, issue 20): the one
 * caller left is store/sqlite/write-channel.ts, whose static import of node:worker_threads
 * would let this file go.
 */
export function builtin<T>(name: `node:${string}`): T {
  return requireHere(name) as T;
}
