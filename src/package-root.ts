/** The package root (package.json, fixtures/): under src/ and in the flat dist/ bundle alike, every file is one level down, so `..` is the root. */
export const PACKAGE_ROOT = new URL('../', import.meta.url);
