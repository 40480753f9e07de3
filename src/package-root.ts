/**
 * The package's root folder (where package.json and fixtures/ live). Every module that reads a
 * file shipped with the package goes through this one URL: under src/ (tests, tsx) this file is
 * one level down, and in the built dist/ every bundled file is one level down as well (the
 * bundle script keeps its outputs flat), so `..` is the root in both.
 */
export const PACKAGE_ROOT = new URL('../', import.meta.url);
