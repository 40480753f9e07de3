import { describe, expect, it } from 'vitest';
import { defaultStorePath, resolveStorePath } from '../../src/store/path.js';

describe('where the store lives', () => {
  it('is --store, else ENRICH_STORE, else the XDG state directory, else ~/.local/state', () => {
    expect(resolveStorePath('/flag.db', { ENRICH_STORE: '/srv/enrich.db' })).toBe('/flag.db');
    expect(resolveStorePath(undefined, { ENRICH_STORE: '/srv/enrich.db', XDG_STATE_HOME: '/x' })).toBe('/srv/enrich.db');
    expect(resolveStorePath(undefined, { XDG_STATE_HOME: '/var/state', HOME: '/home/u' })).toBe('/var/state/enrich/store.db');
    expect(defaultStorePath({ HOME: '/home/u' })).toBe('/home/u/.local/state/enrich/store.db');
  });

  it('ignores an empty ENRICH_STORE and a relative XDG_STATE_HOME, as the XDG spec says', () => {
    expect(resolveStorePath(undefined, { ENRICH_STORE: '', XDG_STATE_HOME: 'state', HOME: '/home/u' })).toBe('/home/u/.local/state/enrich/store.db');
  });
});
