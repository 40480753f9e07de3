import { createRequire } from 'node:module';
import type v8 from 'node:v8';
import type perfHooks from 'node:perf_hooks';

/**
 * Heap tuning for a large input (it lowers the peak measurably for a few per cent of CPU). Flags are set only on the V8s of Node 20-24:
 * V8 prints an unknown flag's error to stdout, our data. A flag the user started Node with stands.
 */
function setFlag(name: string, flag: string): void {
  const given = `${process.execArgv.join(' ')}\n${process.env['NODE_OPTIONS'] ?? ''}`;
  // --name, --no-name, --name=..., with dashes or underscores.
  if ([name, name.replace(/-/g, '_')].some((n) => given.includes(`--${n}`) || given.includes(`--no-${n}`) || given.includes(`--no${n}`)) || !knownV8()) return;
  (createRequire(import.meta.url)('node:v8') as typeof v8).setFlagsFromString(flag);
}

function knownV8(): boolean {
  const major = Number(process.versions.v8.split('.')[0]);
  return major >= 11 && major <= 13;
}

/** Inputs below this (about 10,000 domains) are too small for the heap's growth to matter. */
export const TUNE_HEAP_FROM_BYTES = 256 * 1024;

/** A tuned run's young generation stops growing at this many MiB a semi-space (V8's own limit is 16). */
export const YOUNG_SEMI_MIB = 8;

/** Whether tuneHeap tuned this run: then holdYoungGeneration holds the young generation too. */
let tuned = false;

/** Keeps the heap near what is live for a large input (V8 lets the old generation grow fourfold under heavy allocation); read on every collection, so setting it before parsing takes effect. */
export function tuneHeap(inputBytes: number): void {
  if (inputBytes < TUNE_HEAP_FROM_BYTES || !knownV8()) return;
  setFlag('heap-growing-percent', '--heap-growing-percent=25');
  tuned = true;
  holdYoungGeneration();
}

/**
 * Holds a tuned run's young generation at YOUNG_SEMI_MIB a semi-space (V8 doubles it up to 16 MiB when much survives). Judged after every
 * collection: V8 resets the growth factor for each new isolate (the writer thread calls this once online) and shrinks an idle one. A user-sized one is left alone.
 */
export function holdYoungGeneration(): void {
  if (!tuned || /--(max|min)[-_]semi[-_]space[-_]size/.test(`${process.execArgv.join(' ')}\n${process.env['NODE_OPTIONS'] ?? ''}`)) return;
  if (young === null) {
    const require = createRequire(import.meta.url);
    young = { spaces: (require('node:v8') as typeof v8).getHeapSpaceStatistics, holding: false };
    new (require('node:perf_hooks') as typeof perfHooks).PerformanceObserver(judgeYoung).observe({ entryTypes: ['gc'] });
  }
  judgeYoung();
}

let young: { spaces: typeof v8.getHeapSpaceStatistics; holding: boolean } | null = null;

function judgeYoung(): void {
  if (young === null) return;
  const space = young.spaces().find((s) => s.space_name === 'new_space');
  if (space === undefined) return;
  const factor = growthFactor(space.space_size / 2, young.holding);
  if (factor !== null) setFlag('semi-space-growth-factor', `--semi-space-growth-factor=${factor}`);
  young.holding = factor === 1;
}

/** The growth factor for a semi-space of `semiBytes`: 1 at the hold (set each time, as a worker's start resets it), 2 below it once held, null for V8's own. */
export function growthFactor(semiBytes: number, holding: boolean): 1 | 2 | null {
  if (semiBytes >= YOUNG_SEMI_MIB * 1024 * 1024) return 1;
  return holding ? 2 : null;
}
