import { spawn } from 'node:child_process';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import Database from 'libsql';
import { describe, expect, it } from 'vitest';
import { csvText, runCli } from './helpers/cli.js';
import { startGate } from './helpers/gate.js';
import { sandboxSuite } from './helpers/sandbox-suite.js';
import { spawnCli } from './helpers/spawn.js';

/**
 * Issue 19 item 1: a batch must keep SQLite's POSIX lock on its store for as long as it runs. A
 * process closing any descriptor of the file drops every fcntl lock the process holds on it; the
 * writer thread's open once did, and then any other connection that closed (`sqlite3`, `enrich
 * ledger`) took itself for the last one and checkpointed and deleted the WAL under the live run.
 */
const KEY = 'sk_test_store_lock_0123456789';
const t = sandboxSuite(KEY);
const LIBSQL = createRequire(import.meta.url).resolve('libsql');

/** Opens the store as `sqlite3` does (read-write), reads, and really closes it (no statement is kept). */
const READER = `
const Database = require(process.argv[1]);
const db = new Database(process.argv[2]);
db.exec('PRAGMA busy_timeout = 10000; SELECT count(*) FROM purchases; SELECT count(*) FROM companies');
db.close();
`;

function readAndClose(store: string): Promise<number> {
  const child = spawn(process.execPath, ['-e', READER, LIBSQL, store], { stdio: 'inherit' });
  return new Promise((resolve) => child.on('exit', (code) => resolve(code ?? 1)));
}

/** Whether /proc/locks shows a lock of process `pid` on the file with inode `ino` (Linux). */
function holdsLock(pid: number, ino: number): boolean {
  return readFileSync('/proc/locks', 'utf8')
    .split('\n')
    .some((line) => {
      const fields = line.trim().split(/\s+/);
      // "1: POSIX  ADVISORY  READ 4242 08:01:123456 128 128"; a blocked waiter's line has "->".
      const at = fields[1] === '->' ? 2 : 1;
      return fields[at + 3] === String(pid) && fields[at + 4]?.split(':')[2] === String(ino);
    });
}

/** Waits for a condition on the run's progress (charges at the sandbox), never for a length of time. */
async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setTimeout(resolve, 5));
}

describe('the store lock', () => {
  // Its WAL stays, and nothing is bought twice.
  it('is held by a batch on the writer thread while other processes open and close the store', async () => {
    await t.sandbox();
    const list = [...t.sb.directory].slice(0, 240).map((c) => c.domain);
    const input = t.dir.file('in.csv', csvText([['domain'], ...list.map((d) => [d])]));
    const store = t.dir.file('store.db');
    // Every paid call goes through a gate, so each round of readers meets the run mid-way, however fast the machine.
    const gate = await startGate(t.sb.url, 0, (path) => path.includes('/company/match'));
    try {
      const batch = spawnCli([input, '-o', t.dir.file('out.csv'), '--quiet', '--store', store, '--concurrency', '4'], {
        env: { ENRICH_BASE_URL: gate.url, ENRICH_API_KEY: KEY, ENRICH_STORE_WRITER: 'thread' },
      });
      let running = true;
      void batch.exited.then(() => (running = false));
      const charged = (): number => t.sb.ledger(KEY).length;
      let wal: number | null = null;
      for (let round = 1; round <= 8; round++) {
        gate.allow(10);
        // Purchases seen at the service: the run's intents are committed, so its writer thread has opened the store.
        await until(() => charged() >= round * 10 || !running);
        expect(running, batch.stderr()).toBe(true);
        wal ??= statSync(`${store}-wal`).ino;
        if (existsSync('/proc/locks')) expect(holdsLock(batch.child.pid as number, statSync(store).ino), `round ${round}: no lock held on the store`).toBe(true);
        expect(await readAndClose(store)).toBe(0);
        const ledger = await runCli(['ledger', '--store', store]);
        expect(ledger.code, ledger.stderr).toBe(0);
        // The run is held at the gate: its WAL must be the very file it began with.
        expect(existsSync(`${store}-wal`) ? statSync(`${store}-wal`).ino : null, `round ${round}: the WAL was deleted under the run`).toBe(wal);
      }
      gate.open();
      expect(await batch.exited, batch.stderr()).toBe(0);
    } finally {
      await gate.close();
    }
    const db = new Database(store);
    try {
      expect(db.prepare('PRAGMA integrity_check').raw(true).all()).toStrictEqual([['ok']]);
      expect(db.prepare('SELECT count(*) FROM companies').raw(true).get()).toStrictEqual([list.length]);
    } finally {
      db.close();
    }
    const charges = t.sb.chargesByDomain(KEY);
    expect(charges.size).toBe(list.length);
    for (const [domain, n] of charges) expect(n, domain).toBe(1);
  });
});
