import { readFileSync } from 'node:fs';
import { expect, it } from 'vitest';

const read = (name: string): Record<string, unknown> => JSON.parse(readFileSync(new URL(`../../${name}`, import.meta.url), 'utf8')) as Record<string, unknown>;

// So npm install ends without a warning.
it('allows the install script of every package in the lock file that has one', () => {
  const lock = read('package-lock.json') as { packages: Record<string, { hasInstallScript?: boolean }> };
  const allowed = (read('package.json')['allowScripts'] ?? {}) as Record<string, boolean>;
  const scripted = Object.entries(lock.packages)
    .filter(([, p]) => p.hasInstallScript === true)
    .map(([path]) => path.replace(/^.*node_modules\//, ''));
  expect(scripted.length).toBeGreaterThan(0);
  expect(scripted.filter((name) => allowed[name] !== true)).toStrictEqual([]);
});
