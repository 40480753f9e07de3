/**
 * The build: src/ and its dependencies that are cheap to parse, bundled into one CommonJS file,
 * dist/enrich.cjs (plus dist/version.cjs for `enrich --version`, and dist/store-writer.cjs, the
 * store's writer thread: see src/store/write-channel.ts).
 *
 * Why: a run with nothing left to do is mostly start-up, and start-up was module loading. Node's
 * ES module loader costs a fixed few ms before any code runs and more for every file it links;
 * one CommonJS file is read, compiled and run in one go. The code's lazy `import()`s stay lazy
 * (esbuild defers each module's initialisation to its first import), so a command still runs
 * only what it needs.
 *
 * Dependencies kept outside the bundle load with require() only where used: libsql (a native
 * addon chosen at run time), undici (the network; a third of a megabyte nothing needs before a
 * call), tldts (the Public Suffix List; not needed when the scan is cached), csv-parse (likewise)
 * and cli-progress (the live display). The ES-module-only one (ora) is bundled.
 *
 * Type-checking is `npm run typecheck`; this only transpiles.
 */
import { build } from 'esbuild';
import { rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
rmSync(`${root}/dist`, { recursive: true, force: true });
await build({
  absWorkingDir: root,
  entryPoints: { enrich: 'src/cli/main.ts', version: 'src/version.ts', 'store-writer': 'src/store/sqlite/writer-thread.ts' },
  outdir: 'dist',
  outExtension: { '.js': '.cjs' },
  bundle: true,
  format: 'cjs',
  platform: 'node',
  target: 'node20',
  // pg (the team store's driver) is loaded from node_modules only when a postgres:// store is named.
  external: ['libsql', 'undici', 'tldts', 'csv-parse', 'cli-progress', 'pg'],
  minify: process.env['ENRICH_BUILD_MINIFY'] !== '0',
  sourcemap: 'linked',
  legalComments: 'linked',
  logLevel: 'warning',
  // Where the code reads a file shipped beside it (src/package-root.ts) or requires relative to
  // itself, `import.meta.url` is this file's URL, as it is for the ES modules under src/.
  // (esbuild's documented pattern: an injected module, so no banner comes before "use strict").
  inject: ['scripts/import-meta-url.js'],
  define: { 'import.meta.url': 'importMetaUrl' },
});
