import { describe, expect, it } from 'vitest';
import { findDomainColumn } from '../../src/pipeline/columns.js';
import { InputError } from '../../src/errors.js';

describe('findDomainColumn', () => {
  it.each([
    [['Name', 'Domain'], 1],
    [['name', ' Company Website '], 1],
    [['Account', 'company_domain', 'website'], 1],
    [['Account', 'WEBSITE_URL'], 1],
    [['id', 'Company-URL'], 1],
    [['\ufeffDomain', 'x'], 0],
    [['url', 'domain'], 1],
    [['Name', ' "Web Site" '], 1],
  ])('%j -> %i', (header, index) => {
    expect(findDomainColumn(header, undefined)).toBe(index);
  });

  it('uses --column exactly, or loosely', () => {
    expect(findDomainColumn(['a', 'Site Address', 'domain'], 'Site Address')).toBe(1);
    expect(findDomainColumn(['a', 'Site Address', 'domain'], 'site_address')).toBe(1);
  });

  it('names the headers it saw when it cannot decide', () => {
    expect(() => findDomainColumn(['Name', 'Owner'], undefined)).toThrow(InputError);
    expect(() => findDomainColumn(['Name', 'Owner'], undefined)).toThrow(/pass --column <name>. The header has: "Name", "Owner"/);
    expect(() => findDomainColumn(['Name', 'Owner'], 'Web')).toThrow(/no column named "Web"; the header has: "Name", "Owner"/);
  });
});
