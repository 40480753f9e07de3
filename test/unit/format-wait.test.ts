import { describe, expect, it } from 'vitest';
import { formatWait } from '../../src/errors.js';

describe('formatWait: a wait the service asked for, said sanely', () => {
  it.each([
    [0, '0 s'],
    [1, '1 s'],
    [44.2, '45 s'],
    [59.5, '1 min'],
    [60, '1 min'],
    // The run stops for a wait over 5 minutes: one just over must not read as 5 minutes.
    [300, '5 min'],
    [300.4, '5 min 1 s'],
    [301, '5 min 1 s'],
    [359, '5 min 59 s'],
    [600, '10 min'],
    [3599, '59 min 59 s'],
    [3600, '1 h'],
    [3601, '1.1 h'],
    [5400, '1.5 h'],
    [86_399, '24 h'],
    [86_400, '24 h'],
    [86_401, '24.1 h'],
    [86_400 * 2, '2 days'],
    [86_400 * 3, '3 days'],
    [86_400 * 3 + 1, '3.1 days'],
    [86_400 * 365, '365 days'],
    [86_400 * 365 + 1, 'over a year'],
    // An HTTP date in year 9999, and a Retry-After of 1e308 seconds, as a hostile service sent.
    [2912115 * 86_400, 'over a year'],
    [1e308, 'over a year'],
    [Number.POSITIVE_INFINITY, 'over a year'],
    [Number.NaN, 'over a year'],
  ])('%s s -> %s', (seconds, text) => {
    expect(formatWait(seconds)).toBe(text);
  });

  it('says a Retry-After of 301 s as over the 5 minutes it is', () => {
    expect(formatWait(301)).toBe('5 min 1 s');
  });
});
