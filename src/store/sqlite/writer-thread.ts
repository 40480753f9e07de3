/** The store's writer thread (dist/store-writer.cjs; see write-channel.ts): its own connection, committing the run's batches in order. */
import { parentPort, workerData } from 'node:worker_threads';
import { Store } from './store.js';
import type { WriterReply, WriterRequest, WriterThreadData } from './write-channel.js';
import { RecordWriter } from './writer.js';

const data = workerData as WriterThreadData;
const port = parentPort;
if (port === null) throw new Error('writer-thread.ts runs as a worker thread only');

let store: Store | null = null;
let writer: RecordWriter | null = null;
let openError: unknown = null;
try {
  // Only joins the store the run's connection checked; never makes one where it has gone (a store moved aside is not started afresh).
  store = Store.open(data.path, { tool: data.tool, create: false });
  writer = new RecordWriter(store, data.serviceId, data.run, data.storeId);
} catch (error) {
  openError = error;
}

port.on('message', (text: string) => {
  const request = JSON.parse(text) as WriterRequest;
  if ('close' in request) {
    store?.close();
    port.close();
    return;
  }
  let reply: WriterReply;
  try {
    if (writer === null) throw openError;
    reply = { id: request.id, claims: writer.write(request.batch, request.now) };
  } catch (error) {
    const e = error as { message?: unknown; code?: unknown };
    reply = { id: request.id, error: { message: typeof e?.message === 'string' ? e.message : String(error), code: typeof e?.code === 'string' ? e.code : undefined } };
  }
  port.postMessage(reply);
});
