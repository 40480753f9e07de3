import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { growthFactor, YOUNG_SEMI_MIB } from '../../src/heap.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

// tuneHeap sets its flags only on the V8s it is known on (Node 20 to 24).
const tunes = [11, 12, 13].includes(Number(process.versions.v8.split('.')[0]));

/**
 * The young generation's size (MiB, both halves) after a load that keeps a good share of what it
 * allocates alive for a while, yielding to the event loop as a run does, in a child process: tuned as a big input's
 * run is (or not), with a worker thread started as the store's writer is, and held once it is online.
 */
function youngAfterLoad(hold: boolean, env: NodeJS.ProcessEnv = process.env): number {
  const out = execFileSync(process.execPath, [
    '--import',
    'tsx',
    '-e',
    `const { tuneHeap, holdYoungGeneration } = await import(${JSON.stringify(join(ROOT, 'src/heap.ts'))});
     const { Worker } = await import('node:worker_threads'); const v8 = await import('node:v8');
     if (${hold}) tuneHeap(64 * 1024 * 1024, {});
     const w = new Worker('setTimeout(() => {}, 200)', { eval: true, resourceLimits: { maxYoungGenerationSizeMb: 4 } });
     await new Promise((resolve) => w.once('online', resolve));
     if (${hold}) holdYoungGeneration();
     const keep = [];
     for (let i = 0; i < 4e6; i++) { keep.push({ a: i, b: 'x' + i }); if (keep.length > 2e5) keep.splice(0, 1e5); if (i % 10000 === 0) await new Promise((r) => setImmediate(r)); }
     process.stdout.write(String(v8.getHeapSpaceStatistics().find((s) => s.space_name === 'new_space').space_size / 1048576));`,
  ], { cwd: ROOT, env });
  return Number(out.toString());
}

describe('holdYoungGeneration', () => {
  it.runIf(tunes)("holds a big run's young generation though a worker thread's start reset V8's growth", () => {
    const held = youngAfterLoad(true);
    expect(held).toBeGreaterThan(0);
    expect(held).toBeLessThanOrEqual(2 * YOUNG_SEMI_MIB * 2);
    // Untuned, the same load grows it to V8's own limit: the hold is what keeps it small.
    expect(youngAfterLoad(false)).toBeGreaterThan(held);
  });

  it.runIf(tunes)('leaves a young generation the user sized alone', () => {
    expect(youngAfterLoad(true, { ...process.env, NODE_OPTIONS: `${process.env['NODE_OPTIONS'] ?? ''} --max-semi-space-size=64` })).toBeGreaterThan(2 * YOUNG_SEMI_MIB * 2);
  });
});

describe('growthFactor', () => {
  const MiB = 1024 * 1024;
  it('holds at the hold, every time it is judged (a worker thread\'s start resets it)', () => {
    expect(growthFactor(YOUNG_SEMI_MIB * MiB, false)).toBe(1);
    expect(growthFactor(YOUNG_SEMI_MIB * MiB, true)).toBe(1);
  });

  // V8 shrinks it over an idle stretch.
  it('lets V8 grow it back to the hold after V8 shrank it, and leaves V8 alone before', () => {
    // Held at 1 after a shrink, it would stay at 1 MiB and collect hundreds of times more (review).
    expect(growthFactor(MiB, true)).toBe(2);
    expect(growthFactor(MiB, false)).toBeNull();
  });
});
