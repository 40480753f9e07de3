import { open, realpath, stat } from 'node:fs/promises';
import type { CompanyRecord } from '../api/types.js';
import type { EnrichEntry, JournalEntry } from './legacy/entries.js';
import { JournalCorruptError, readJournal } from './legacy/journal-reader.js';
import type { ServiceStore, StoreEvent } from './types.js';

export interface Imported {
  path: string;
  service: string;
  companies: number;
  /** Purchases left open by that version: resumed under their own keys. */
  open: number;
  /** Why the journal could be read only in part (its lines before the damage were imported). */
  damaged: string | null;
}

const str = (v: unknown): v is string => typeof v === 'string' && v !== '';
const int = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;

/** One journal line as a store event, or null for lines with nothing to import or wrong types. */
function toEvent(entry: JournalEntry, lastKey: Map<string, string>): StoreEvent | null {
  switch (entry.t) {
    case 'match':
      if (!str(entry.d) || (entry.s !== 'hit' && entry.s !== 'miss') || (entry.s === 'hit' && !str(entry.c))) return null;
      return { type: 'match', domain: entry.d, status: entry.s, ...(entry.s === 'hit' ? { company: entry.c as string, name: str(entry.n) ? entry.n : (entry.c as string) } : {}) };
    case 'intent':
      if (!str(entry.c) || !int(entry.v) || !str(entry.key)) return null;
      lastKey.set(entry.c, entry.key);
      return { type: 'intent', company: entry.c, generation: 1, keyVersion: entry.v, key: entry.key };
    case 'enrich':
      return enrichEvent(entry, lastKey);
    default:
      return null;
  }
}

function enrichEvent(e: EnrichEntry, lastKey: Map<string, string>): StoreEvent | null {
  if (!str(e.c) || !int(e.v) || (e.s !== 'hit' && e.s !== 'miss' && e.s !== 'error')) return null;
  const charged = int(e.charged) ? e.charged : 0;
  const key = lastKey.get(e.c);
  // The key the journal sent under: its events move only the purchase still under that key (purchase.ts applyOutcome).
  const base = { type: 'enrich', company: e.c, generation: 1, keyVersion: e.v, charged, ...(key === undefined ? {} : { keyUsed: key }) } as const;
  if (e.s === 'hit') {
    const company = e.company as CompanyRecord | undefined;
    if (company === undefined || typeof company !== 'object' || !str(company.domain) || !str(company.name)) return null;
    return { ...base, status: 'hit', record: company };
  }
  if (e.s === 'miss') return { ...base, status: 'miss' };
  return {
    ...base,
    status: 'error',
    code: str(e.code) ? e.code : 'error',
    verdict: e.key === 'retired' ? 'retired' : 'kept',
    ...(e.final === true ? { final: true } : {}),
  };
}

/** Events of a journal, each with the moment it happened (the session's start, as 0.1 kept it). */
export type JournalEvents = readonly { event: StoreEvent; at: number }[];

/** A store a journal can be imported into (store/sqlite/store.ts, store/postgres/store.ts). */
export interface JournalTarget {
  /** How much of the journal known by `path` (its real path and run) was imported before (bytes), or null. */
  importedBytes(path: string): Promise<number | null>;
  /** One service's records, to apply a journal's events to as the past (no run claims anything). */
  importer(service: string): Promise<{ importEvents(events: JournalEvents): Promise<void>; loadCompanies: ServiceStore['loadCompanies'] }>;
  markImported(path: string, bytes: number, companies: number): Promise<void>;
}

/** What to say of a file given as a journal that is not one. */
export const notJournal = (path: string): string => `${path} is not a journal written by enrich 0.1 (it does not start with one's header); nothing imported`;

/** A file's first line as a journal's header; 'unknown' when the file is empty or that line is longer than 64 KiB (the import itself will tell). */
async function headerOf(path: string): Promise<{ t?: unknown; run?: unknown } | null | 'unknown'> {
  const handle = await open(path, 'r');
  try {
    const { buffer, bytesRead } = await handle.read(Buffer.alloc(64 * 1024), 0, 64 * 1024, 0);
    const text = buffer.subarray(0, bytesRead).toString('utf8');
    if (bytesRead === 0 || (!text.includes('\n') && bytesRead === buffer.length)) return 'unknown';
    const header = JSON.parse(text.split('\n', 1)[0] ?? '') as { t?: unknown; run?: unknown } | null;
    return header?.t === 'header' ? header : null;
  } catch {
    return null;
  } finally {
    await handle.close();
  }
}

/** Whether a file starts as a journal of enrich 0.1 does (its header line), or is empty. */
export const looksLikeJournal = async (path: string): Promise<boolean> => (await headerOf(path)) !== null;

/** Imports an enrich 0.1 journal once (again only if it grew): its companies become held records, its open purchases resume under their own keys. */
export async function importJournal(store: JournalTarget, path: string): Promise<Imported | 'not_journal' | null> {
  let real: string;
  let bytes: number;
  try {
    real = await realpath(path);
    bytes = (await stat(real)).size;
  } catch {
    return null;
  }
  // Known by its path and its run: 0.1's --fresh starts a new journal where the old one was.
  const header = await headerOf(real).catch(() => null);
  const key = header !== null && header !== 'unknown' && str(header.run) ? `${real} ${header.run}` : real;
  // Earlier versions knew it by its path alone: such a journal is read once more, which moves nothing a run or the first read wrote.
  const done = await store.importedBytes(key);
  if (done !== null && done >= bytes) return null;
  // A journal that grew since (0.1 ran on): what was imported stays, only the rest is applied.
  const from = done ?? 0;

  let service: string | null = null;
  type Importer = Awaited<ReturnType<JournalTarget['importer']>>;
  let records: Importer | null = null;
  let at = Date.now();
  const lastKey = new Map<string, string>();
  const bought = new Set<string>();
  let events: { event: StoreEvent; at: number }[] = [];
  let damaged: string | null = null;
  let read: { validBytes: number } | null = null;
  try {
    read = await readJournal(real, async (entry, offset) => {
      if (entry.t === 'header') {
        service = str(entry.service) ? entry.service : null;
        records = service === null ? null : await store.importer(service);
        const created = Date.parse(entry.created);
        if (Number.isFinite(created)) at = created;
        return;
      }
      if (entry.t === 'session') {
        const started = Date.parse(entry.at);
        if (Number.isFinite(started)) at = started;
        return;
      }
      const event = toEvent(entry, lastKey);
      if (event === null || records === null || offset < from) return;
      if (event.type === 'enrich' && event.status === 'hit') bought.add(event.company);
      events.push({ event, at });
      // In slices: a million-row journal is never held in memory whole.
      if (events.length >= 10_000) {
        await records.importEvents(events);
        events = [];
      }
    });
  } catch (error) {
    // What came before the damage is real and was paid for: keep it, and say so.
    if (!(error instanceof JournalCorruptError)) throw error;
    damaged = error.message;
  }
  // No journal header to start it (a CSV given by mistake): nothing in it was written by 0.1.
  if (service === null || records === null) return bytes === 0 || from > 0 ? null : 'not_journal';
  // TypeScript cannot see the callback's assignment: name the narrowed value.
  const target: Importer = records;
  await target.importEvents(events);
  const companies = bought.size;
  let open = 0;
  await target.loadCompanies([...lastKey.keys()], (_, state) => {
    if (state.purchase?.outcome === 'open') open++;
  });
  // Up to the last whole line: 0.1 cuts a torn tail off before it appends, so the next import starts there.
  const upTo = read?.validBytes ?? from;
  await store.markImported(key, upTo, companies);
  return { path: real, service, companies, open, damaged };
}
