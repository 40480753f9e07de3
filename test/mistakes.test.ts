import { writeFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { tempDir } from './helpers/cli.js';
import { runProcess } from './helpers/spawn.js';

/** Issue 22: common mistakes get one line with the fix, exit 2, and never echo a secret. */
describe('mistakes with a fix', () => {
  it('--api-key is refused, pointing at ENRICH_API_KEY or --api-key-file, never showing it', async () => {
    for (const args of [['x.csv', '--api-key', 'sk_live_secret_1234'], ['--api-key=sk_live_secret_1234', 'x.csv'], ['doctor', '--api-key', 'sk_live_secret_1234']]) {
      const r = await runProcess(args);
      expect(r.code).toBe(2);
      expect(r.stderr).toBe('enrich: the API key is never taken as a flag value, which `ps` shows to everyone: set ENRICH_API_KEY, or put it in a file and give --api-key-file <path>\n');
      expect(r.stdout + r.stderr).not.toContain('sk_live_secret');
    }
    // Nor the value of any other unknown --flag=value.
    const other = await runProcess(['x.csv', '--token=sk_live_secret_1234']);
    expect(other).toMatchObject({ code: 2, stderr: "enrich: unknown option '--token=…' (see enrich --help)\n" });
  });

  it('several inputs: one line saying how', async () => {
    const r = await runProcess(['a.csv', 'b.csv']);
    expect(r).toMatchObject({
      code: 2,
      stderr: 'enrich: one input at a time: run enrich once per file (the store buys no company twice across them), or join the files into one CSV first (see enrich --help)\n',
    });
  });

  it('`enrich help` and `enrich help ledger` work like --help', async () => {
    const help = await runProcess(['help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toBe((await runProcess(['--help'])).stdout);
    const ledger = await runProcess(['help', 'ledger']);
    expect(ledger.code).toBe(0);
    expect(ledger.stdout).toBe((await runProcess(['ledger', '--help'])).stdout);
  });

  it('a workbook, in or out, is refused with what to do', async () => {
    const dir = tempDir();
    try {
      const book = dir.file('crm.xlsx');
      writeFileSync(book, 'PK\x03\x04');
      const input = await runProcess([book, '--sandbox']);
      expect(input).toMatchObject({ code: 2, stderr: `enrich: ${book} is a spreadsheet workbook, not CSV: export it as CSV (in Excel: File > Save As > CSV UTF-8) and give that file\n` });
      const out = dir.file('out.xlsx');
      const output = await runProcess(['fixtures/companies.csv', '--sandbox', '-o', out]);
      expect(output).toMatchObject({ code: 2, stderr: `enrich: -o ${out}: enrich writes CSV or JSONL, which a spreadsheet refuses under that name; give -o ${dir.path}/out.csv (Excel opens it)\n` });
    } finally {
      dir.cleanup();
    }
  });

  it('--color is not taken for --column, and a suggestion stays on the one line', async () => {
    const color = await runProcess(['x.csv', '--color']);
    expect(color.code).toBe(2);
    expect(color.stderr).toBe("enrich: unknown option '--color': enrich prints no colour; --no-progress (or ENRICH_PROGRESS=0) turns off the live display (see enrich --help)\n");
    const typo = await runProcess(['x.csv', '--colum', 'Web']);
    expect(typo).toMatchObject({ code: 2, stderr: "enrich: unknown option '--colum' (did you mean --column?) (see enrich --help)\n" });
  });
});
