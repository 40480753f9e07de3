#!/usr/bin/env node
'use strict';
// The whole CLI is dist/enrich.cjs (built by `npm install` through the prepare script).
const argv = process.argv.slice(2);
if (argv.length === 1 && (argv[0] === '--version' || argv[0] === '-V')) {
  // A bare --version answers without loading the CLI: scripts probe installs with it.
  process.stdout.write(`${require('../dist/version.cjs').VERSION}\n`);
} else {
  // Node 22.8 and later keep the compiled bundle between runs, in the user's own cache folder
  // (not the shared temp folder); Node 20 compiles it each time. NODE_DISABLE_COMPILE_CACHE=1 turns it off.
  // Only under a folder that is there: Node makes every missing folder on the way, and a HOME
  // that does not exist (a crontab's typo) must stay missing for the store's check to refuse it.
  const { enableCompileCache } = require('node:module');
  if (enableCompileCache !== undefined) {
    const { join } = require('node:path');
    const xdg = process.env.XDG_CACHE_HOME;
    const root = xdg !== undefined && xdg.startsWith('/') ? xdg : require('node:os').homedir();
    if (require('node:fs').statSync(root, { throwIfNoEntry: false })?.isDirectory() === true) enableCompileCache(join(root, xdg === root ? '' : '.cache', 'enrich'));
  }
  const { main, processIO } = require('../dist/enrich.cjs');
  main(argv, processIO()).then((code) => {
    process.exitCode = code;
  });
}
