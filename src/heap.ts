import { createRequire } from 'node:module';
import type v8 from 'node:v8';
import type perfHooks from 'node:perf_hooks';
import { startFlags } from './node-flags.js';

/** The V8 flags this process set, each with the flag that puts it back: restoreV8Flags does. */
const changed = new Map<string, string>();

/**
 * Sets V8 flag `name` with `flag` (its text), `undo` being the text that puts back what it was,
 * unless Node was started with it (the user's choice stands), or this V8 is not one it is known
 * on: V8 prints an unknown flag's error to stdout (our data), so flags are set only on the V8s of
 * Node 20 to 24 (11 to 13); a later V8 runs without them until checked.
 */
function setFlag(name: string, flag: string, undo: string): void {
  const given = startFlags();
  // --name, --no-name, --name=..., with dashes or underscores.
  if ([name, name.replace(/-/g, '_')].some((n) => given.includes(`--${n}`) || given.includes(`--no-${n}`) || given.includes(`--no${n}`)) || !knownV8()) return;
  const { setFlagsFromString } = createRequire(import.meta.url)('node:v8') as typeof v8;
  if (!changed.has(name)) changed.set(name, undo);
  setFlagsFromString(flag);
}

function knownV8(): boolean {
  const major = Number(process.versions.v8.split('.')[0]);
  return major >= 11 && major <= 13;
}

/**
 * Puts back the V8 flags this process set. V8 stamps a code cache with a hash of the flags in
 * force when it is made, and refuses one made under other flags: the code cache kept at the end
 * of a run (cli/code-cache.ts) must carry the flags every run starts with.
 */
export function restoreV8Flags(): void {
  tuned = false;
  if (changed.size === 0) return;
  const { setFlagsFromString } = createRequire(import.meta.url)('node:v8') as typeof v8;
  for (const undo of changed.values()) setFlagsFromString(undo);
  changed.clear();
}

/**
 * WebAssembly compiled by V8's baseline compiler alone (Liftoff), never again by TurboFan. The
 * one module a run compiles is undici's HTTP parser (llhttp), and TurboFan's compile of it took
 * 25 to 30 MiB for a moment, as the first requests went out: a plain undici client peaked at
 * 105-108 MiB, 78 without it, and a 20,000-domain run's peak fell 6 to 8 MiB (paired runs), with
 * no measurable cost in speed (parsing is a small share of a request's time). Both flags are
 * needed (either alone still tiered up: V8's --liftoff-only sets both, but is a testing flag);
 * their default is on from V8 11 to 13. Set before undici loads; restoreV8Flags puts them back.
 */
export function baselineWasm(): void {
  setFlag('wasm-tier-up', '--no-wasm-tier-up', '--wasm-tier-up');
  setFlag('wasm-dynamic-tiering', '--no-wasm-dynamic-tiering', '--wasm-dynamic-tiering');
}

/**
 * Inputs below this are too small for the heap's growth to matter (and node:v8 costs ~3 ms to
 * load): about 10,000 domains. The 20,000-domain run of `npm run bench` is 500 KB.
 */
export const TUNE_HEAP_FROM_BYTES = 256 * 1024;

/**
 * A tuned run's young generation stops growing at this many MiB a semi-space (V8's own limit is
 * 16). At 4, a 20,000-domain run (companies spread through it) collected so often that it took
 * 1.08x the wall time of 8, for 9 MiB less at its peak (paired runs, 2026-11-27); at 16, 20 MiB
 * more than at 4, and no faster than 8.
 */
export const YOUNG_SEMI_MIB = 8;

/** Whether tuneHeap tuned this run: then holdYoungGeneration holds the young generation too. */
let tuned = false;

/**
 * Keeps the heap near what is live for a large input. V8 otherwise lets the old generation grow
 * up to fourfold between collections under a high allocation rate, which is most of a big batch's
 * peak memory. Growing by a fixed ENRICH_HEAP_GROWTH percent (default 25) cut a 1M-row run's peak
 * from 188 to 167 MiB; with the young generation held as well (holdYoungGeneration), a 20,000-domain
 * run's from 177 to 140 MiB, for a few percent more CPU against an unlimited service (paired
 * runs, docs/rate-limits-and-performance.md). The flag is read on every collection, so setting it
 * once the input's size is known, before it is parsed, takes effect; a small input (most runs, and
 * every quick rerun) skips it, and with it the cost of loading node:v8 at start-up.
 */
export function tuneHeap(inputBytes: number, env: NodeJS.ProcessEnv = process.env): void {
  if (inputBytes < TUNE_HEAP_FROM_BYTES) return;
  const percent = Number(env['ENRICH_HEAP_GROWTH'] ?? 25);
  if (!Number.isInteger(percent) || percent <= 0 || !knownV8()) return;
  setFlag('heap-growing-percent', `--heap-growing-percent=${percent}`, '--heap-growing-percent=0');
  tuned = true;
  holdYoungGeneration();
}

/**
 * Holds a tuned run's young generation once it has grown to YOUNG_SEMI_MIB a semi-space. V8
 * doubles it up to 16 MiB (32 with both halves) whenever enough has survived since it last grew,
 * and a run keeps much alive (its input's rows at the start, its answers after): the last 16 MiB
 * were an eighth of a 20,000-domain run's peak and bought no measurable speed. Each collection
 * reads the growth factor, so setting it to 1 stops the growth where it is. It is judged again
 * after every collection (watching from tuneHeap on): V8 puts the factor back to 2 whenever it
 * sets up an isolate, a worker thread's included (so it is also set at once when the store's
 * writer thread comes online, store/sqlite/write-channel.ts), and V8 shrinks an idle young
 * generation (a long Retry-After): below the hold, the factor goes back to 2, so it grows to the
 * hold again rather than staying small and collecting hundreds of times more. A young generation
 * the user sized (--max-semi-space-size, --min-semi-space-size) is left alone.
 */
export function holdYoungGeneration(): void {
  if (!tuned || /--(max|min)[-_]semi[-_]space[-_]size/.test(startFlags())) return;
  if (young === null) {
    const require = createRequire(import.meta.url);
    young = { spaces: (require('node:v8') as typeof v8).getHeapSpaceStatistics, holding: false };
    new (require('node:perf_hooks') as typeof perfHooks).PerformanceObserver(judgeYoung).observe({ entryTypes: ['gc'] });
  }
  judgeYoung();
}

/** The hold, once a tuned run has begun it: how to read the young generation, and whether it is held. */
let young: { spaces: typeof v8.getHeapSpaceStatistics; holding: boolean } | null = null;

/** Sets the growth factor the young generation's size calls for (growthFactor); after every collection. */
function judgeYoung(): void {
  // Not once the flags are put back (restoreV8Flags): the code cache is made under them.
  if (!tuned || young === null) return;
  const space = young.spaces().find((s) => s.space_name === 'new_space');
  if (space === undefined) return;
  const factor = growthFactor(space.space_size / 2, young.holding);
  if (factor !== null) setFlag('semi-space-growth-factor', `--semi-space-growth-factor=${factor}`, '--semi-space-growth-factor=2');
  young.holding = factor === 1;
}

/**
 * The young generation's growth factor to set, for a semi-space of `semiBytes`, `holding` if
 * the last judgement held it: 1 at the hold (set again each time: a worker's start resets it),
 * 2 again below it once held (V8 shrank it), null to leave V8's own.
 */
export function growthFactor(semiBytes: number, holding: boolean): 1 | 2 | null {
  if (semiBytes >= YOUNG_SEMI_MIB * 1024 * 1024) return 1;
  return holding ? 2 : null;
}
