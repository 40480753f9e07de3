import type { JournalTarget } from './import-journal.js';
import type { LedgerOpen, LedgerStore } from './ledger-types.js';
import { statOrNull } from '../io/paths.js';
import { hostIdentity } from './host.js';
import { personName } from './budget.js';
import { isTeamStore } from './path.js';
import type { ConnectionNotice, RunInfo, ServiceStore } from './types.js';
import { explainDamage } from './sqlite/errors.js';
import { causeChain, EnrichError } from '../errors.js';

/** A run's store failure as the user should read it: a damaged SQLite file named as such (PostgreSQL's errors come explained already). */
export const explainStoreFailure = (error: unknown, store: string): unknown => explainDamage(error, store, true);

/** Whether a team store's error says it could not be reached: its refusal as unavailable, or a connection its driver lost. */
export async function teamStoreOutOfReach(error: unknown): Promise<boolean> {
  if (error instanceof EnrichError) return error.kind === 'unavailable';
  const { isConnectionLoss } = await import('./postgres/connect.js');
  for (const e of causeChain(error)) if (isConnectionLoss(e)) return true;
  return false;
}

/** A store a batch runs against: a file path is one person's SQLite store, a postgres:// address the team's; each backend loads only when named. */
export interface BatchStore extends JournalTarget {
  /** The store's clock (a team store's: its server's): every time a run stamps or compares. */
  readonly now: () => number;
  /** Opens a run against one service: its records, and a row in `runs` saying who runs it. */
  beginRun(service: string, info: RunInfo): Promise<ServiceStore>;
  close(): Promise<void>;
}

export interface OpenOptions {
  tool: string;
  /** A clock for tests; by default the store's own. */
  now?: () => number;
  env: NodeJS.ProcessEnv;
  /** Told when a team store's connection is lost and when it is back (a SQLite store has none). */
  notice?: (n: ConnectionNotice) => void;
  /** The run's interrupt: from then on a lost team store is not waited for. */
  interrupt?: AbortSignal;
}

export async function openBatchStore(address: string, options: OpenOptions): Promise<BatchStore> {
  if (isTeamStore(address)) {
    const [{ PgStore }, { abandonReconnects, onConnectionNotice }] = await Promise.all([import('./postgres/store.js'), import('./postgres/connect.js')]);
    onConnectionNotice(options.notice ?? null);
    options.interrupt?.addEventListener('abort', abandonReconnects, { once: true });
    const host = hostIdentity(options.env);
    const store = await PgStore.open(address, { tool: options.tool, user: personName(options.env), ...(options.now === undefined ? {} : { now: options.now }), ...(host === undefined ? {} : { host }) });
    return {
      now: store.now,
      importedBytes: (path) => store.importedBytes(path),
      importer: (service) => store.importer(service),
      markImported: (path, bytes, companies) => store.markImported(path, bytes, companies),
      beginRun: (service, info) => store.beginRun(service, info),
      close: async () => {
        // What this run listened for ends with it (the listener is the process's, not the store's).
        options.interrupt?.removeEventListener('abort', abandonReconnects);
        try {
          await store.close();
        } finally {
          onConnectionNotice(null);
        }
      },
    };
  }
  const [{ Store }, { chooseWriter }] = await Promise.all([import('./sqlite/store.js'), import('./sqlite/write-channel.js')]);
  const host = hostIdentity(options.env);
  const store = Store.open(address, { tool: options.tool, user: personName(options.env), ...(options.now === undefined ? {} : { now: options.now }), ...(host === undefined ? {} : { host }) });
  return {
    now: store.options.now,
    importedBytes: (path) => store.importedBytes(path),
    importer: (service) => store.importer(service),
    markImported: (path, bytes, companies) => store.markImported(path, bytes, companies),
    beginRun: async (service, info) => store.beginRun(service, info, chooseWriter(options.env)),
    close: async () => store.close(),
  };
}

/** A store as `enrich ledger` reads and tidies it, whichever backend its address names (loaded only then). */
export async function openLedgerStore(address: string, how: LedgerOpen): Promise<LedgerStore> {
  if (isTeamStore(address)) {
    const { PgLedger } = await import('./postgres/ledger.js');
    return PgLedger.open(address, how);
  }
  const { SqliteLedger } = await import('./sqlite/ledger.js');
  return SqliteLedger.open(address, how);
}

/** Whether a store is at `address` (a file that is not empty; a database with enrich's tables), without making or changing one. */
export async function storeExists(address: string): Promise<boolean> {
  if (isTeamStore(address)) {
    const { storeThere } = await import('./postgres/ledger.js');
    return storeThere(address);
  }
  const found = statOrNull(address);
  return found !== null && !(found.isFile() && found.size === 0);
}
