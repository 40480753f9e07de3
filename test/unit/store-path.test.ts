import { describe, expect, it } from 'vitest';
import { defaultStorePath } from '../../src/store/path.js';

describe('defaultStorePath', () => {
  const home = (): string => '/home/fallback';
  it('prefers ENRICH_STORE, then an absolute XDG_STATE_HOME, then ~/.local/state', () => {
    expect(defaultStorePath({ ENRICH_STORE: '/srv/enrich.db', XDG_STATE_HOME: '/x' }, home)).toBe('/srv/enrich.db');
    expect(defaultStorePath({ XDG_STATE_HOME: '/var/state', HOME: '/home/u' }, home)).toBe('/var/state/enrich/store.sqlite');
    expect(defaultStorePath({ HOME: '/home/u' }, home)).toBe('/home/u/.local/state/enrich/store.sqlite');
  });
  it('ignores an empty ENRICH_STORE and a relative XDG_STATE_HOME, and falls back to the account home', () => {
    expect(defaultStorePath({ ENRICH_STORE: '', XDG_STATE_HOME: 'state', HOME: '/home/u' }, home)).toBe('/home/u/.local/state/enrich/store.sqlite');
    expect(defaultStorePath({}, home)).toBe('/home/fallback/.local/state/enrich/store.sqlite');
  });
});
