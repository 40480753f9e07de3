import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { holdYoungGeneration } from '../../heap.js';
import { UsageError } from '../../errors.js';
import { PACKAGE_ROOT } from '../../package-root.js';
import type { Connection } from './connection.js';
import type { Claim } from '../types.js';
import { RecordWriter, type WriteItem } from './writer.js';

/** Where a run's batches are committed, one at a time (the caller awaits each before the next, so order is kept). */
export interface WriteChannel {
  /** Commits the batch in one transaction; the claims, in order, once it is on disk. */
  write(batch: readonly WriteItem[], now: number): Promise<Claim[]>;
  /** Ends the channel once nothing is pending (idempotent). */
  close(): Promise<void>;
}

/** On the run's own connection, in this thread: tests, and a build without the writer thread. */
export function inlineChannel(store: Connection, serviceId: number, run: number | null, storeId: string | null = null): WriteChannel {
  const writer = new RecordWriter(store, serviceId, run, storeId);
  return {
    write: async (batch, now) => writer.write(batch, now),
    close: async () => {},
  };
}

/** What the writer thread (writer-thread.ts) is told when it starts. */
export interface WriterThreadData {
  path: string;
  tool: string;
  serviceId: number;
  run: number | null;
  /** The store id with the key epoch the run began under. */
  storeId: string | null;
}

export type WriterRequest = { id: number; batch: readonly WriteItem[]; now: number } | { close: true };
export type WriterReply = { id: number; claims: Claim[] } | { id: number; error: { message: string; code: string | undefined } };

/** Where a run's writes are committed: its own connection, the writer thread, or a caller's channel (tests holding commits back). */
export type WriterChoice = { kind: 'inline' } | { kind: 'thread'; file: string } | { kind: 'channel'; open: () => WriteChannel };

/** The writer thread beside the bundle (dist/), or the built one when running from src/ (tests). */
const THREAD_FILES = [new URL('store-writer.cjs', import.meta.url), new URL('dist/store-writer.cjs', PACKAGE_ROOT)];

/**
 * The writer thread when the build has one, unless ENRICH_STORE_WRITER=inline (`thread` asks for the built file even from src/).
 * SQLite's inserts, most of a fast run's CPU, then overlap the requests on a connection of their own (WAL allows it).
 */
export function chooseWriter(env: NodeJS.ProcessEnv): WriterChoice {
  const asked = env['ENRICH_STORE_WRITER'];
  if (asked !== undefined && asked !== '' && asked !== 'inline' && asked !== 'thread') {
    throw new UsageError(`ENRICH_STORE_WRITER=${asked}: expected inline or thread`);
  }
  if (asked === 'inline') return { kind: 'inline' };
  const candidates = asked === 'thread' ? THREAD_FILES : THREAD_FILES.slice(0, 1);
  const found = candidates.find((url) => existsSync(url));
  if (found !== undefined) return { kind: 'thread', file: fileURLToPath(found) };
  if (asked === 'thread') throw new UsageError('ENRICH_STORE_WRITER=thread, but dist/store-writer.cjs is not built (npm run build)');
  return { kind: 'inline' };
}

export function openChannel(choice: WriterChoice, store: Connection, serviceId: number, run: number | null, storeId: string | null): WriteChannel {
  if (choice.kind === 'inline') return inlineChannel(store, serviceId, run, storeId);
  if (choice.kind === 'channel') return choice.open();
  return threadChannel(choice.file, { path: store.path, tool: store.options.tool, serviceId, run, storeId });
}

/** The writer thread's young generation, in MiB. */
const WRITER_YOUNG_MB = 4;

/** A worker thread with its own connection, started at the first write; it holds the process open only while a batch is out. One that dies fails every batch still out. */
export function threadChannel(file: string, data: WriterThreadData): WriteChannel {
  let worker: Worker | null = null;
  let starting: Promise<Worker> | null = null;
  let nextId = 0;
  let dead: Error | null = null;
  /** The batch last sent: batches go one at a time, so when it settles nothing is out. */
  let last: Promise<unknown> = Promise.resolve();
  const pending = new Map<number, { resolve: (claims: Claim[]) => void; reject: (error: Error) => void }>();

  const fail = (error: Error): void => {
    dead ??= error;
    for (const p of pending.values()) p.reject(dead);
    pending.clear();
  };

  const start = async (): Promise<Worker> => {
    // A small young generation: the thread's garbage is short-lived, and V8's default grows it by tens of MiB for no speed.
    const w = new Worker(file, { workerData: data, resourceLimits: { maxYoungGenerationSizeMb: WRITER_YOUNG_MB } });
    w.unref();
    // V8 resets the young generation's growth factor when it sets up this thread's isolate: hold it from here (heap.ts).
    w.once('online', holdYoungGeneration);
    w.on('message', (reply: WriterReply) => {
      const p = pending.get(reply.id);
      if (p === undefined) return;
      pending.delete(reply.id);
      if (pending.size === 0) w.unref();
      if ('error' in reply) p.reject(Object.assign(new Error(reply.error.message), { code: reply.error.code }));
      else p.resolve(reply.claims);
    });
    w.on('error', (error) => fail(error));
    w.on('exit', (code) => fail(new Error(`the store's writer thread stopped (exit code ${code})`)));
    worker = w;
    return w;
  };

  return {
    async write(batch, now) {
      if (dead !== null) throw dead;
      const w = worker ?? (await (starting ??= start()));
      const id = nextId++;
      const claims = new Promise<Claim[]>((resolve, reject) => pending.set(id, { resolve, reject }));
      w.ref();
      // As JSON text: several times faster than postMessage's structured clone, on the run's busiest thread.
      w.postMessage(JSON.stringify({ id, batch, now } satisfies WriterRequest));
      last = claims;
      return claims;
    },
    async close() {
      const w = worker ?? (starting === null ? null : await starting.catch(() => null));
      worker = null;
      if (w === null || dead !== null) return;
      // Whatever is out is committed first (a thread stopped mid-transaction would keep the
      // store's write lock until the process ends); then the thread closes its connection.
      await last.catch(() => {});
      dead = new Error("the store's writer thread was closed");
      const exited = new Promise<void>((resolve) => w.once('exit', () => resolve()));
      w.ref();
      w.postMessage(JSON.stringify({ close: true } satisfies WriterRequest));
      await exited;
    },
  };
}
