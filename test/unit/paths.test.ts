import { existsSync, mkdirSync, mkdtempSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { resolveRunOptions } from '../../src/cli/options.js';
import { parseCommandLine } from '../../src/cli/program.js';
import { landsAt, makeDirs } from '../../src/io/paths.js';

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

describe('makeDirs', () => {
  it('makes every missing folder, 0700, and leaves one that is there', () => {
    makeDirs(join(dir, 'a', 'b', 'c'), 0o700);
    expect(statSync(join(dir, 'a', 'b', 'c')).isDirectory()).toBe(true);
    expect(statSync(join(dir, 'a')).mode & 0o777).toBe(0o700);
    makeDirs(join(dir, 'a', 'b'), 0o700);
  });

  // A dangling link, or a file.
  it('stops at a name that is not a folder rather than make the rest past it', () => {
    symlinkSync(join(dir, 'nowhere'), join(dir, 'link'));
    expect(() => makeDirs(join(dir, 'link', 'x'), 0o700)).toThrow(/EEXIST/);
    expect(existsSync(join(dir, 'nowhere'))).toBe(false);
    writeFileSync(join(dir, 'file'), '');
    expect(() => makeDirs(join(dir, 'file', 'x'), 0o700)).toThrow(/ENOTDIR|EEXIST/);
  });
});
