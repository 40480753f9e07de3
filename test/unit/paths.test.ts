import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { resolveRunOptions } from '../../src/cli/options.js';
import { parseCommandLine } from '../../src/cli/program.js';
import { landsAt } from '../../src/io/paths.js';

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'enrich-paths-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe('where writing to a path lands', () => {
  it('reads a relative link target against the link\'s real folder, as the kernel does', () => {
    mkdirSync(join(dir, 'phys', 'sub'), { recursive: true });
    symlinkSync('phys/sub', join(dir, 'alias'));
    symlinkSync('../target.csv', join(dir, 'phys', 'sub', 'out'));
    // Through alias/out the kernel reaches phys/target.csv, not <dir>/target.csv.
    expect(landsAt(join(dir, 'alias', 'out'))).toBe(join(dir, 'phys', 'target.csv'));
  });

  it('refuses, before anything is bought, an -o link into a folder that does not exist', async () => {
    writeFileSync(join(dir, 'in.csv'), 'domain\nacme.com\n');
    mkdirSync(join(dir, 'links'));
    symlinkSync('../nodir/x.csv', join(dir, 'links', 'out.csv'));
    const parsed = parseCommandLine([join(dir, 'in.csv'), '--sandbox', '-o', join(dir, 'links', 'out.csv')], { writeOut: () => {}, writeErr: () => {} }, {});
    if (parsed.kind !== 'run') throw new Error('not a run');
    await expect(resolveRunOptions(parsed.flags, { XDG_STATE_HOME: dir })).rejects.toThrow(/the folder .*nodir does not exist \(.* is a link there\)/);
  });
});
