import { appendFileSync, existsSync, readFileSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openJournal, type EventEntry, type JournalIdentity } from '../../src/journal/index.js';
import { acquireLock } from '../../src/journal/lock.js';
import { RecordReader } from '../../src/journal/records.js';
import { JournalWriteError, JournalWriter } from '../../src/journal/writer.js';
import { UsageError } from '../../src/errors.js';
import { tempDir } from '../helpers/cli.js';

const identity: JournalIdentity = { input: { sha256: 'a'.repeat(64), bytes: 120, name: 'in.csv' }, column: 'domain', service: 'https://svc/api/v1/public' };
const company = { domain: 'acme.com', name: 'Acme', website_url: null, description: 'Ünïcode ✓', industry: null, employee_count: 5, revenue_range: null, ownership_type: null, year_founded: null, specialties: ['x'], hq_country: null, hq_city: null, last_updated: '2026-01-01T00:00:00.000Z' };

let dir: ReturnType<typeof tempDir>;
let path: string;
beforeEach(() => {
  dir = tempDir();
  path = dir.file('run.journal');
});
afterEach(() => dir.cleanup());

async function open(options: { fresh?: boolean; identity?: JournalIdentity } = {}) {
  const seen: { entry: EventEntry; offset: number; length: number }[] = [];
  const journal = await openJournal(path, {
    identity: options.identity ?? identity,
    tool: 'enrich/test',
    fresh: options.fresh ?? false,
    dryRun: false,
    replay: (entry, offset, length) => seen.push({ entry, offset, length }),
  });
  return { journal, seen };
}

describe('journal', () => {
  it('creates an owner-only file with a header and one session line per invocation', async () => {
    const { journal } = await open();
    expect(journal.created).toBe(true);
    await journal.close();
    expect(statSync(path).mode & 0o777).toBe(0o600);
    const { journal: again, seen } = await open();
    expect(again.created).toBe(false);
    expect(again.session).toBe(2);
    expect(again.header.run).toBe(journal.header.run);
    expect(seen.map((s) => s.entry.t)).toStrictEqual(['session']);
    await again.close();
  });

  it('replays entries with the offsets a record can be read back from', async () => {
    const { journal } = await open();
    const a = journal.writer.append({ t: 'match', d: 'acme.com', s: 'hit', c: 'acme.com', n: 'Acme' });
    const b = journal.writer.append({ t: 'enrich', c: 'acme.com', v: 1, s: 'hit', charged: 1, remaining: 9, company });
    await Promise.all([a.written, b.written]);
    await journal.close();
    const { journal: again, seen } = await open();
    const enrich = seen.find((s) => s.entry.t === 'enrich');
    expect(enrich?.offset).toBe(b.offset);
    expect(enrich?.length).toBe(b.length);
    const reader = new RecordReader(path);
    expect(reader.read({ offset: b.offset, length: b.length })).toStrictEqual(company);
    reader.close();
    await again.close();
  });

  it('tolerates a torn last line: drops it and appends cleanly after', async () => {
    const { journal } = await open();
    await journal.writer.append({ t: 'match', d: 'a.com', s: 'miss' }).written;
    await journal.close();
    appendFileSync(path, '{"t":"match","d":"b.co');
    const { journal: again, seen } = await open();
    expect(again.tornBytes).toBe(22);
    expect(seen.filter((s) => s.entry.t === 'match')).toHaveLength(1);
    await again.writer.append({ t: 'match', d: 'c.com', s: 'miss' }).written;
    await again.close();
    const lines = readFileSync(path, 'utf8').trim().split('\n');
    for (const line of lines) expect(() => JSON.parse(line) as unknown).not.toThrow();
    expect(lines.at(-1)).toBe('{"t":"match","d":"c.com","s":"miss"}');
  });

  it('treats garbage at the tail as torn, and garbage in the middle as corruption', async () => {
    const { journal } = await open();
    await journal.close();
    appendFileSync(path, '\u0000\u0000\u0000\n');
    const { journal: again } = await open();
    expect(again.tornBytes).toBe(4);
    await again.writer.append({ t: 'match', d: 'a.com', s: 'miss' }).written;
    await again.close();
    const text = readFileSync(path, 'utf8').split('\n');
    text.splice(1, 0, 'not json');
    writeFileSync(path, text.join('\n'));
    await expect(open()).rejects.toThrow(/is not a usable enrich journal: line 2 is not a journal entry, but later lines are/);
  });

  it('refuses a journal written for another input, column or service, before any work', async () => {
    const { journal } = await open();
    await journal.close();
    const other = { ...identity, input: { ...identity.input, sha256: 'b'.repeat(64), name: 'other.csv' } };
    await expect(open({ identity: other })).rejects.toThrow(UsageError);
    await expect(open({ identity: other })).rejects.toThrow(/belongs to a different input: it was written for "in.csv" \(120 bytes, sha256 aaaaaaaaaaaa…\)/);
    await expect(open({ identity: { ...identity, column: 'Website' } })).rejects.toThrow(/was written reading the column "domain", this run reads "Website"; pass --column "domain" to resume/);
    await expect(open({ identity: { ...identity, service: 'https://other/api/v1/public' } })).rejects.toThrow(/was written against https:\/\/svc/);
    // A refusal leaves the lock free.
    const { journal: ok } = await open();
    await ok.close();
  });

  it('--fresh keeps the old journal beside the new one', async () => {
    const { journal } = await open();
    await journal.writer.append({ t: 'match', d: 'a.com', s: 'miss' }).written;
    await journal.close();
    const { journal: fresh, seen } = await open({ fresh: true, identity: { ...identity, column: 'Website' } });
    expect(fresh.created).toBe(true);
    expect(seen).toHaveLength(0);
    expect(fresh.setAside).not.toBeNull();
    expect(readFileSync(fresh.setAside as string, 'utf8')).toContain('"d":"a.com"');
    await fresh.close();
  });

  it('refuses a second run on the same journal, and takes over a lock its dead owner left', async () => {
    const { journal } = await open();
    await expect(open()).rejects.toThrow(new RegExp(`in use by another enrich \\(pid ${process.pid} on `));
    await journal.close();
    writeFileSync(`${path}.lock`, JSON.stringify({ pid: 2 ** 22 + 12345, host: hostname(), started: '2026-01-01T00:00:00Z' }));
    const { journal: recovered } = await open();
    await recovered.close();
    expect(existsSync(`${path}.lock`)).toBe(false);
    // An unreadable lock (torn while being written) is stale once it is a few seconds old.
    writeFileSync(`${path}.lock`, '');
    await expect(open()).rejects.toThrow(/in use by another enrich;/);
    utimesSync(`${path}.lock`, new Date(Date.now() - 60_000), new Date(Date.now() - 60_000));
    const { journal: taken } = await open();
    await taken.close();
  });

  it('syncs durable lines in groups: one fdatasync serves a whole batch', async () => {
    const { journal } = await open();
    const before = journal.writer.syncs;
    const appends = Array.from({ length: 200 }, (_, i) => journal.writer.append({ t: 'intent', c: `c${i}.com`, v: 1, key: `k${i}` }, true));
    await Promise.all(appends.map((a) => a.written));
    expect(journal.writer.syncs - before).toBeLessThan(10);
    await journal.close();
    expect(readFileSync(path, 'utf8').trim().split('\n')).toHaveLength(2 + 200);
  });
});

describe('journal writer failures', () => {
  it('fails every waiting line with a clear error on a full disk, and accepts nothing after', async () => {
    const writer = await JournalWriter.open('/dev/full', 0);
    const first = writer.append({ t: 'intent', c: 'acme.com', v: 1, key: 'k' }, true);
    await expect(first.written).rejects.toThrow(JournalWriteError);
    await expect(first.written).rejects.toThrow(/cannot write the journal \/dev\/full \(ENOSPC\); no further paid call was made/);
    expect(() => writer.append({ t: 'match', d: 'b.com', s: 'miss' })).toThrow(JournalWriteError);
    await expect(writer.close()).rejects.toThrow(JournalWriteError);
  });
});

describe('journal lock', () => {
  it('takes over a lock naming our own pid when this process does not hold it (a restarted container reuses pids)', async () => {
    const d = tempDir();
    try {
      const journal = d.file('j');
      writeFileSync(`${journal}.lock`, JSON.stringify({ pid: process.pid, host: hostname(), started: '2026-01-01T00:00:00Z' }));
      const lock = acquireLock(journal);
      expect(JSON.parse(readFileSync(lock.path, 'utf8')).started).not.toBe('2026-01-01T00:00:00Z');
      // Held now: a second acquire in this process is refused.
      expect(() => acquireLock(journal)).toThrow(/in use by another enrich/);
      lock.release();
    } finally {
      d.cleanup();
    }
  });

  it('clears a takeover token abandoned by a run killed mid-takeover', async () => {
    const d = tempDir();
    try {
      const journal = d.file('j');
      writeFileSync(`${journal}.lock`, JSON.stringify({ pid: 2 ** 22 + 77, host: hostname(), started: 'x' }));
      writeFileSync(`${journal}.lock.takeover`, '');
      const old = new Date(Date.now() - 60_000);
      utimesSync(`${journal}.lock.takeover`, old, old);
      const lock = acquireLock(journal);
      expect(existsSync(`${journal}.lock.takeover`)).toBe(false);
      lock.release();
    } finally {
      d.cleanup();
    }
  });
});
