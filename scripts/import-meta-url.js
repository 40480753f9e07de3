// Injected into the CommonJS bundle by scripts/build.mjs: what `import.meta.url` is under src/.
// (In the bundle, `require` and `__filename` are CommonJS's own.)
// eslint-disable-next-line @typescript-eslint/no-require-imports -- this runs as CommonJS
export const importMetaUrl = require('node:url').pathToFileURL(__filename).href;
