import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { call, ENRICH, MATCH } from './helpers/http.js';
import { readCsvFile, tempDir } from './helpers/cli.js';
import { runProcess, spawnCli } from './helpers/spawn.js';

const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string };

describe('the built CLI', () => {
  it('prints its version and a help with examples for the three uses', async () => {
    expect(await runProcess(['--version'])).toMatchObject({ code: 0, stdout: `${pkg.version}\n` });
    const help = await runProcess(['--help']);
    expect(help.code).toBe(0);
    for (const text of ['enrich companies.csv -o enriched.csv', 'enrich crm.csv --column', '--api-key-file', '--dry-run', 'Exit codes:', 'ENRICH_API_KEY']) {
      expect(help.stdout).toContain(text);
    }
    const sandboxHelp = await runProcess(['sandbox', '--help']);
    expect(sandboxHelp.code).toBe(0);
    expect(sandboxHelp.stdout).toContain('--rate-limit <req/s>');
    expect(sandboxHelp.stdout).toContain('Examples:');
    expect(sandboxHelp.stdout).toContain('$ enrich sandbox --port 4010 --key sk_demo');
  });

  it('answers usage errors with one line and exit 2, never a stack trace', async () => {
    const none = await runProcess([]);
    expect(none.code).toBe(2);
    expect(none.stderr).toBe('enrich: missing input: give a CSV file, or - to read stdin (see enrich --help)\n');
    const flag = await runProcess(['x.csv', '--concurrency', 'lots']);
    expect(flag.code).toBe(2);
    expect(flag.stderr).toContain("enrich: option '--concurrency <n>' argument 'lots' is invalid. --concurrency must be a whole number from 1 to 256");
    const missing = await runProcess(['does-not-exist.csv', '--sandbox']);
    expect(missing).toMatchObject({ code: 2, stderr: 'enrich: no such file: does-not-exist.csv\n' });
    const noUrl = await runProcess(['x.csv'], { env: { ENRICH_API_KEY: 'k' } });
    expect(noUrl.code).toBe(2);
    expect(noUrl.stderr).toMatch(/^enrich: no service address: set ENRICH_BASE_URL or pass --base-url <url>/);
    const dir = tempDir();
    const keyDir = await runProcess(['x.csv', '--base-url', 'http://127.0.0.1:9', '--api-key-file', dir.path]);
    dir.cleanup();
    expect(keyDir).toMatchObject({ code: 2, stderr: `enrich: cannot read the API key file ${dir.path}: it is a directory\n` });
    // A mistyped ledger command is not an argument to its default (show); every ledger refusal points at its help.
    const ledger = await runProcess(['ledger', 'bogus']);
    expect(ledger).toMatchObject({ code: 2, stderr: "enrich: unknown ledger command 'bogus': give show, runs, export, prune, release, import, spend, copy (see enrich ledger --help)\n" });
    expect(await runProcess(['ledger', 'prnue', '--older-than', '3d'])).toMatchObject({ code: 2, stderr: "enrich: unknown ledger command 'prnue'; did you mean `enrich ledger prune`? (see enrich ledger --help)\n" });
    expect(await runProcess(['ledger', '--json', 'runs'])).toMatchObject({ code: 2, stderr: 'enrich: give the command before its options: `enrich ledger runs ...` (see enrich ledger --help)\n' });
    expect(await runProcess(['ledger', '--jsno'])).toMatchObject({ code: 2, stderr: "enrich: unknown option '--jsno' (did you mean --json?) (see enrich ledger --help)\n" });
    expect(await runProcess(['ledger', 'show', 'extra'])).toMatchObject({ code: 2, stderr: "enrich: ledger show takes no arguments ('extra' given) (see enrich ledger --help)\n" });
    const prune = await runProcess(['ledger', 'prune']);
    expect(prune).toMatchObject({ code: 2, stderr: "enrich: required option '--older-than <duration>' not specified (see enrich ledger prune --help)\n" });
    for (const r of [none, flag, missing, noUrl, keyDir, ledger, prune]) expect(r.stderr).not.toMatch(/\n\s+at /);
  });

  // Node's own mkdir -p spun forever there.
  it.runIf(process.platform === 'linux')('refuses a store where no folder can be made (under /proc) in one line', async () => {
    const dir = tempDir();
    // The sandbox's own store, whose folders are made on first use (as the default's), in a state home under /proc.
    const run = spawnCli(['fixtures/companies.csv', '--sandbox', '--quiet', '-o', dir.file('out.csv')], { env: { XDG_STATE_HOME: '/proc/enrich-test', ENRICH_STORE: undefined } });
    try {
      expect(await run.exited).toBe(2);
      expect(run.stderr()).toBe('enrich: cannot open the store /proc/enrich-test/enrich/sandbox.db: no folder can be made there; pass --store <path> (or ENRICH_STORE) to use another\n');
      // doctor makes a folder there for real before it says the store can be created (root may write anywhere, by its bits).
      const doctor = await runProcess(['doctor', '--sandbox'], { env: { XDG_STATE_HOME: '/proc/enrich-test', ENRICH_STORE: undefined } });
      expect(doctor.code).toBe(2);
      expect(doctor.stdout).toContain('store      FIX   /proc/enrich-test/enrich/store.db cannot be created: /proc is not writable (ENOENT)');
      // A named store's folder must be there, as for a batch.
      const named = await runProcess(['doctor', '--sandbox', '--store', dir.file('typo/store.db')]);
      expect(named.code).toBe(2);
      expect(named.stdout).toContain(`store      FIX   ${dir.file('typo/store.db')} cannot be created: the folder ${dir.file('typo')} does not exist; create it, or fix --store (or ENRICH_STORE)`);
    } finally {
      run.child.kill('SIGKILL');
      dir.cleanup();
    }
  });

  it('refuses a bad flag value in one line with exit 2, never naming 2^53 - 1', async () => {
    const port = await runProcess(['sandbox', '--port', 'abc']);
    expect(port).toMatchObject({ code: 2, stdout: '' });
    expect(port.stderr).toBe("enrich: option '--port <n>' argument 'abc' is invalid. --port must be a whole number from 0 to 65535 (see enrich sandbox --help)\n");
    const credits = await runProcess(['x.csv', '--max-credits', '-1']);
    expect(credits.code).toBe(2);
    expect(credits.stderr).toContain('--max-credits must be a whole number, 0 or more');
    const balance = await runProcess(['sandbox', '--balance', '1.5']);
    expect(balance.code).toBe(2);
    expect(balance.stderr).toContain('--balance must be a whole number, 0 or more');
    for (const r of [port, credits, balance]) {
      expect(r.stderr).not.toContain('9007199254740991');
      expect(r.stderr.trimEnd().split('\n')).toHaveLength(1);
    }
  });

  it('an unknown word is neither file nor command; --json on a batch points at --summary-json', async () => {
    const word = await runProcess(['status'], { env: { ENRICH_BASE_URL: '', ENRICH_API_KEY: '' } });
    expect(word).toMatchObject({ code: 2, stderr: 'enrich: no such file or command: status; the commands are sandbox, doctor, ledger, budget (enrich --help), and an input is a CSV file or - for stdin\n' });
    const json = await runProcess(['in.csv', '--json']);
    expect(json.code).toBe(2);
    expect(json.stderr).toBe("enrich: unknown option '--json': a batch writes its totals as JSON with --summary-json <path|-> and its rows as JSON lines with --format jsonl (see enrich --help)\n");
  });

  it('suggests the subcommand for a mistyped one, unless a file of that name exists', async () => {
    const typo = await runProcess(['sandox'], { env: { ENRICH_BASE_URL: 'https://data.example.invalid', ENRICH_API_KEY: 'k' } });
    expect(typo).toMatchObject({ code: 2, stderr: 'enrich: no such file or command: sandox; did you mean `enrich sandbox`?\n' });
    const dir = tempDir();
    try {
      dir.file('sandox', 'domain\nnobody-here.com\n');
      const file = await runProcess(['sandox', '--sandbox', '-o', dir.file('out.csv')], { cwd: dir.path });
      expect(file.code, file.stderr).toBe(0);
    } finally {
      dir.cleanup();
    }
  });

  it('serves the sandbox, prints its URL and key, and stops cleanly on SIGTERM, SIGINT, SIGHUP', async () => {
    for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) {
      const p = spawnCli(['sandbox', '--port', '0', '--key', 'sk_proc_test', '--balance', '7']);
      await p.waitFor('Ctrl-C to stop.');
      const url = /listening on (http:\/\/\S+)/.exec(p.stdout())?.[1] as string;
      expect(p.stdout()).toContain('key sk_proc_test (scope search:read, 7 credits)');
      const r = await call(url, 'GET', `${MATCH}?domain=example.com`, { key: 'sk_proc_test' });
      expect(r.status).toBe(200);
      p.child.kill(signal);
      expect(await p.exited).toBe(0);
      expect(p.stdout()).toContain('enrich sandbox stopped');
    }
  });

  it('serves Stripe-like idempotency on request: a stored 500 replayed without a request id', async () => {
    const p = spawnCli(['sandbox', '--port', '0', '--key', 'sk_proc_stripe', '--fail-rate', '1', '--idempotency', 'stripe', '--replay-request-id', 'none']);
    await p.waitFor('Ctrl-C to stop.');
    expect(p.stdout()).toContain('idempotency: every outcome stored, replays carry no request id');
    const url = /listening on (http:\/\/\S+)/.exec(p.stdout())?.[1] as string;
    const send = () => call(url, 'POST', ENRICH, { key: 'sk_proc_stripe', body: { domain: 'example.com' }, headers: { 'idempotency-key': 'ik' } });
    const first = await send();
    const replay = await send();
    expect([first.status, replay.status]).toStrictEqual([500, 500]);
    expect(first.headers['idempotent-replayed']).toBeUndefined();
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect('requestId' in replay.json).toBe(false);
    p.child.kill('SIGTERM');
    expect(await p.exited).toBe(0);
    const bad = await runProcess(['sandbox', '--idempotency', 'sometimes']);
    expect(bad.code).toBe(2);
  });

  it.each(['SIGTERM', 'SIGHUP'] as const)("a %s while the key file is being read exits 130 in one line, not the signal's code", async (signal) => {
    const dir = tempDir();
    try {
      const fifo = dir.file('key.fifo');
      execFileSync('mkfifo', [fifo]);
      const p = spawnCli([dir.file('in.csv', 'domain\nacme.com\n'), '--api-key-file', fifo, '--base-url', 'http://127.0.0.1:9'], {});
      // Opening a FIFO for writing waits for its reader: once it is open, the CLI is reading the key.
      const writer = await open(fifo, 'w');
      p.child.kill(signal);
      // The file is closed only once the signal is said: an end of the file read first would be an
      // empty key, said before the signal was (found with four test files at once). The process
      // then ends as its read of the file does.
      try {
        await p.waitFor('interrupted', 120_000);
      } finally {
        await writer.close();
      }
      expect(await p.exited).toBe(130);
      expect(p.stderr()).toBe(`enrich: ${signal}: interrupted; run the same command to finish\n`);
    } finally {
      dir.cleanup();
    }
  });

  it('never prints a key it took from ENRICH_API_KEY, which may be a real one', async () => {
    const p = spawnCli(['sandbox', '--port', '0'], { env: { ENRICH_API_KEY: 'sk_live_do_not_print_me' } });
    await p.waitFor('Ctrl-C to stop.');
    expect(p.stdout()).not.toContain('sk_live_do_not_print_me');
    expect(p.stdout()).toContain('key: the value of $ENRICH_API_KEY, not shown');
    const url = /listening on (http:\/\/\S+)/.exec(p.stdout())?.[1] as string;
    expect((await call(url, 'GET', `${MATCH}?domain=example.com`, { key: 'sk_live_do_not_print_me' })).status).toBe(200);
    p.child.kill('SIGTERM');
    expect(await p.exited).toBe(0);
  });

  // Per-plan figures that no plan would bill stay in the JSON, off the screen.
  it('prices a dry run by the month, what it adds on the cheapest plan first', async () => {
    const dir = tempDir();
    try {
      const r = await runProcess(['fixtures/companies.csv', '--sandbox', '--dry-run']);
      expect(r.code, r.stderr).toBe(0);
      const credits = /\n {2}to buy +(\d+) companies/.exec(r.stderr)?.[1];
      expect(credits, r.stderr).toBeDefined();
      expect(r.stderr).not.toContain('at plan rates');
      expect(r.stderr).toMatch(/\n {2}adds to bill +\$99 +to this month's bill on its cheapest plan/);
      expect(r.stderr).toContain(`on Starter, ${credits} of its 2,000 included credits\n`);
    } finally {
      dir.cleanup();
    }
  });

  it('runs the README demo: a real batch against the embedded sandbox', async () => {
    const dir = tempDir();
    try {
      const out = dir.file('enriched.csv');
      const r = await runProcess(['fixtures/companies.csv', '--sandbox', '-o', out]);
      expect(r.code).toBe(0);
      expect(r.stderr).toContain('enrich: done');
      const rows = readCsvFile(out);
      expect(rows).toHaveLength(166);
      expect(rows.filter((x) => x['enrich_status'] === 'matched').length).toBeGreaterThan(140);

      // Then the sandbox's own "Try it" hint, in the same store: another service, so it just runs.
      const server = spawnCli(['sandbox', '--port', '0', '--key', 'sk_try_it']);
      await server.waitFor(/listening on http:\/\/\S+/);
      const url = /listening on (http:\/\/\S+)/.exec(server.stdout())?.[1] as string;
      expect(server.stdout()).toContain(`export ENRICH_BASE_URL=${url}`);
      const tryIt = await runProcess(['fixtures/companies.csv', '-o', out], { env: { ENRICH_BASE_URL: url, ENRICH_API_KEY: 'sk_try_it' } });
      server.child.kill('SIGTERM');
      await server.exited;
      expect(tryIt.code, tryIt.stderr).toBe(0);
      expect(tryIt.stderr).toContain('companies, by this run');
    } finally {
      dir.cleanup();
    }
  });
});
