#!/usr/bin/env node
'use strict';
// The whole CLI is dist/enrich.cjs (built by `npm install` through the prepare script).
const argv = process.argv.slice(2);
if (argv.length === 1 && (argv[0] === '--version' || argv[0] === '-V')) {
  // A bare --version answers without loading the CLI: scripts probe installs with it.
  process.stdout.write(`${require('../dist/version.cjs').VERSION}\n`);
} else {
  // Node 22.1 and later keep the compiled bundle between runs (Node 20 compiles it each time).
  require('node:module').enableCompileCache?.();
  const { main, processIO } = require('../dist/enrich.cjs');
  main(argv, processIO()).then((code) => {
    process.exitCode = code;
  });
}
