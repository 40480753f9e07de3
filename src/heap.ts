import { createRequire } from 'node:module';
import type v8 from 'node:v8';
import { startFlags } from './node-flags.js';

/** The V8 flags this process set, with the value each had before: restoreV8Flags puts them back. */
const changed = new Map<string, string>();

/** Sets a V8 flag to `value`, unless Node was started with it (the user's choice stands). */
function setFlag(name: string, value: number, before: string): void {
  const given = startFlags();
  if (given.includes(`--${name}`) || given.includes(`--${name.replace(/-/g, '_')}`)) return;
  const { setFlagsFromString } = createRequire(import.meta.url)('node:v8') as typeof v8;
  if (!changed.has(name)) changed.set(name, before);
  setFlagsFromString(`--${name}=${value}`);
}

/**
 * Puts back the V8 flags this process set. V8 stamps a code cache with a hash of the flags in
 * force when it is made, and refuses one made under other flags: the code cache kept at the end
 * of a run (cli/code-cache.ts) must carry the flags every run starts with.
 */
export function restoreV8Flags(): void {
  if (changed.size === 0) return;
  const { setFlagsFromString } = createRequire(import.meta.url)('node:v8') as typeof v8;
  for (const [name, before] of changed) setFlagsFromString(`--${name}=${before}`);
  changed.clear();
}

/** Inputs below this are too small for the heap's growth to matter (and node:v8 costs ~3 ms to load). */
export const TUNE_HEAP_FROM_BYTES = 4 * 1024 * 1024;

/**
 * Keeps the heap near what is live for a large input. V8 otherwise lets the old generation grow
 * up to fourfold between collections under a high allocation rate, which is most of a big batch's
 * peak memory. Growing by a fixed ENRICH_HEAP_GROWTH percent (default 25) cut a 1M-row run's peak
 * from 188 to 167 MiB; it costs about a tenth more CPU against an unlimited service (measured).
 * The flag is read on every collection, so setting it once the input's size is known, before it
 * is parsed, takes effect; a small input (most runs, and every quick rerun) skips it, and with it
 * the cost of loading node:v8 at start-up.
 */
export function tuneHeap(inputBytes: number, env: NodeJS.ProcessEnv = process.env): void {
  if (inputBytes < TUNE_HEAP_FROM_BYTES) return;
  const percent = Number(env['ENRICH_HEAP_GROWTH'] ?? 25);
  // V8 prints an unknown flag's error to stdout (our data): set it only on the V8s of Node 20
  // to 24 (11 to 13), where it is known to exist; a later V8 runs untuned until checked.
  const major = Number(process.versions.v8.split('.')[0]);
  if (!Number.isInteger(percent) || percent <= 0 || major < 11 || major > 13) return;
  setFlag('heap-growing-percent', percent, '0');
}
