import { execFileSync } from 'node:child_process';
import { existsSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** enrich 0.1.0 (its journal per input), the baseline the store's figures are set beside. */
export const V01_REF = process.env['ENRICH_BASELINE_REF'] ?? '290541e';

/**
 * Builds enrich at `ref` from this repository's own history into a temp folder, once, and returns
 * its bin: a git worktree sharing this checkout's node_modules (the dependencies 0.1 used are a
 * subset of today's: p-limit, which enrich left for a priority queue, stays a dev dependency for it),
 * compiled with the TypeScript in them.
 */
export function buildBaseline(ref = V01_REF): string {
  const root = fileURLToPath(new URL('../..', import.meta.url));
  const dir = join(tmpdir(), `enrich-baseline-${ref}`);
  const bin = join(dir, 'bin', 'enrich.js');
  if (existsSync(join(dir, 'dist', 'cli', 'main.js'))) return bin;
  if (!existsSync(dir)) execFileSync('git', ['-C', root, 'worktree', 'add', '--detach', dir, ref], { stdio: 'ignore' });
  if (!existsSync(join(dir, 'node_modules'))) symlinkSync(join(root, 'node_modules'), join(dir, 'node_modules'));
  execFileSync(process.execPath, [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(dir, 'tsconfig.build.json')], { stdio: 'inherit' });
  return bin;
}
