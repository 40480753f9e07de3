#!/usr/bin/env node
// The whole CLI lives in dist/ (built by `npm install` through the prepare script).
const argv = process.argv.slice(2);
// A bare --version answers without loading the CLI: scripts probe installs with it.
if (argv.length === 1 && (argv[0] === '--version' || argv[0] === '-V')) {
  process.stdout.write(`${(await import('../dist/version.js')).VERSION}\n`);
} else {
  const { main, processIO, tuneProcess } = await import('../dist/cli/main.js');
  tuneProcess();
  process.exitCode = await main(argv, processIO());
}
