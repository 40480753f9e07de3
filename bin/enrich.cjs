#!/usr/bin/env node
'use strict';
// The whole CLI is dist/enrich.cjs (built by `npm install` through the prepare script), compiled
// through V8's code cache when one is kept (src/cli/code-cache.ts).
const argv = process.argv.slice(2);
if (argv.length === 1 && (argv[0] === '--version' || argv[0] === '-V')) {
  // A bare --version answers without loading the CLI: scripts probe installs with it.
  process.stdout.write(`${require('../dist/version.cjs').VERSION}\n`);
} else {
  const bundle = require('../dist/code-cache.cjs').loadBundle(require.resolve('../dist/enrich.cjs'));
  const { main, processIO, codeCacheWanted, restoreV8Flags } = bundle.exports;
  main(argv, processIO()).then((code) => {
    process.exitCode = code;
    if (codeCacheWanted()) {
      restoreV8Flags();
      bundle.save();
    }
  });
}
