import { readFileSync } from 'node:fs';
import { PACKAGE_ROOT } from './package-root.js';

/** The package version, read once from package.json. */
export const VERSION: string = (JSON.parse(readFileSync(new URL('package.json', PACKAGE_ROOT), 'utf8')) as { version: string }).version;
