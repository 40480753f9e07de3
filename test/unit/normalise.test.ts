import { describe, expect, it } from 'vitest';
import { normaliseDomain } from '../../src/pipeline/normalise.js';

describe('normaliseDomain', () => {
  it.each([
    ['example.com', 'example.com'],
    ['  Example.COM  ', 'example.com'],
    ['example.com.', 'example.com'],
    ['www.example.com', 'example.com'],
    ['https://www.example.co.uk/about?x=1#top', 'example.co.uk'],
    ['shop.example.co.uk', 'example.co.uk'],
    ['http://EXAMPLE.com.br:8080/path', 'example.com.br'],
    ['example.com:443', 'example.com'],
    ['//cdn.example.io/x.js', 'example.io'],
    ['ftp://files.example.de', 'example.de'],
    ['sales@example.fr', 'example.fr'],
    ['münchen.de', 'xn--mnchen-3ya.de'],
    ['https://www.bücher.de/', 'xn--bcher-kva.de'],
    ['xn--mnchen-3ya.de', 'xn--mnchen-3ya.de'],
    ['acme.myshopify.com', 'acme.myshopify.com'],
    ['  "example.com"  ', 'example.com'],
    ["'www.example.com'", 'example.com'],
    ['<https://example.com/>', 'example.com'],
  ])('%s -> %s', (input, expected) => {
    expect(normaliseDomain(input)).toStrictEqual({ ok: true, domain: expected });
  });

  it.each([
    ['', 'empty'],
    ['   ', 'empty'],
    ['N/A', 'not_a_domain'],
    ['tbd', 'not_a_domain'],
    ['co.uk', 'public_suffix'],
    ['com.br', 'public_suffix'],
    ['com', 'not_a_domain'],
    ['localhost', 'not_a_domain'],
    ['192.168.0.10', 'ip_address'],
    ['http://[::1]/', 'ip_address'],
    ['not a website', 'not_a_domain'],
    ['https://', 'not_a_domain'],
    ['intranet.corp', 'unknown_suffix'],
    ['exa mple.com', 'not_a_domain'],
    // Two domains in one cell must not be glued into a third (URL parsing drops tabs and newlines).
    ['www.crescent-fjord-energy.com\nwww.grove-lark-shipping.fr', 'not_a_domain'],
    ['crescent-fjord-energy.com\r\ngrove-lark-shipping.fr', 'not_a_domain'],
    ['acme.com\tgrove-lark-shipping.fr', 'not_a_domain'],
    ['https://acme.com/\x00', 'not_a_domain'],
  ])('%j is invalid (%s)', (input, reason) => {
    expect(normaliseDomain(input)).toStrictEqual({ ok: false, reason });
  });
});
