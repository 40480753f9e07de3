#!/usr/bin/env node
// The whole CLI lives in dist/ (built by `npm install` through the prepare script).
import { main, processIO, tuneProcess } from '../dist/cli/main.js';

tuneProcess();
process.exitCode = await main(process.argv.slice(2), processIO());
