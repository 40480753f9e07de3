import { describe, expect, it } from 'vitest';
import { normaliseDomain } from '../../src/pipeline/normalise.js';
import { registrableDomain } from '../../src/sandbox/domain.js';

// Spec 4.1: a registrable domain; a full URL or a leading www. is normalised.
describe("the sandbox's reading of a domain parameter", () => {
  it.each([
    ['acme.com', 'acme.com'],
    ['www.Acme.com', 'acme.com'],
    ['https://www.acme.co.uk:8443/about?x=1', 'acme.co.uk'],
    ['acme.com.', 'acme.com'],
    ['shop.acme.myshopify.com', 'acme.myshopify.com'],
    ['bücher.de', 'xn--bcher-kva.de'],
  ])('%s is %s', (raw, domain) => {
    expect(registrableDomain(raw)).toBe(domain);
  });

  it.each(['', '   ', 'co.uk', '127.0.0.1', 'http://[::1]/', 'not a domain', 'localhost'])('%j is not a registrable domain', (raw) => {
    expect(registrableDomain(raw)).toBeNull();
  });

  it("agrees with the client's normaliser on what the client sends (its canonical domains)", () => {
    for (const raw of ['https://www.acme.com/', 'Acme.co.uk', 'acme.myshopify.com', 'mail.bücher.de']) {
      const client = normaliseDomain(raw);
      expect(client.ok && registrableDomain(client.domain)).toBe(client.ok && client.domain);
    }
  });
});
