import { describe, expect, it } from 'vitest';
import { editDistance, suggestCommand } from '../../src/cli/suggest.js';

describe('did you mean', () => {
  it('counts edits, a swap of neighbours as one', () => {
    expect(editDistance('sandbox', 'sandbox')).toBe(0);
    expect(editDistance('sandox', 'sandbox')).toBe(1);
    expect(editDistance('sadnbox', 'sandbox')).toBe(1);
    expect(editDistance('doctr', 'doctor')).toBe(1);
    expect(editDistance('', 'abc')).toBe(3);
  });

  it('suggests a subcommand for a near bare word, never for a file-like name or a far word', () => {
    const commands = ['sandbox', 'doctor'];
    expect(suggestCommand('sandox', commands)).toBe('sandbox');
    expect(suggestCommand('Sandbx', commands)).toBe('sandbox');
    expect(suggestCommand('docter', commands)).toBe('doctor');
    expect(suggestCommand('doctor.csv', commands)).toBeNull();
    expect(suggestCommand('./sandox', commands)).toBeNull();
    expect(suggestCommand('companies', commands)).toBeNull();
    expect(suggestCommand('box', commands)).toBeNull();
  });
});
