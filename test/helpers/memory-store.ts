import type { EventSink } from '../../src/pipeline/execute.js';
import type { Claim, StoreEvent } from '../../src/store/types.js';

/** An event sink that keeps what execute() writes, and lets every claim through. */
export function memoryStore(): EventSink & { events: StoreEvent[] } {
  const events: StoreEvent[] = [];
  return {
    events,
    append: (event: StoreEvent): Promise<Claim> => {
      events.push(event);
      return Promise.resolve({ kind: 'ok' });
    },
  };
}
