import { lstat, mkdtemp, rm, stat } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type { Dispatcher } from 'undici';
import { ApiError, ConnectionError, InsufficientScopeError, InvalidTokenError, NotServiceApiError, printable, RateLimitedError } from '../api/errors.js';
import { exchange } from '../api/exchange.js';
import { landsAt } from '../io/paths.js';
import type { ServiceClient } from '../api/client.js';
import { EnrichError, formatWait, type ErrorKind } from '../errors.js';
import { DEFAULT_RETRY_POLICY } from '../api/retry.js';
import { count, duration } from '../ui/format.js';

/** One line of the report: ok, a note (worth knowing, not a failure), or a failure with its fix. */
export interface Check {
  label: string;
  status: 'ok' | 'note' | 'fail';
  text: string;
  /** A failed check's kind of trouble, which cli/main.ts maps to the exit code; null when not failed. */
  kind: ErrorKind | null;
}

export const ok = (label: string, text: string): Check => ({ label, status: 'ok', text, kind: null });
export const note = (label: string, text: string): Check => ({ label, status: 'note', text, kind: null });
export const fail = (label: string, text: string, kind: ErrorKind): Check => ({ label, status: 'fail', text, kind });

/** The domain the key check matches: free, and present in any company data set worth the name. */
export const PROBE_DOMAIN = 'example.com';
/** The operations a batch calls; the description must list both as callable. */
const NEEDED = ['GET /company/match', 'POST /company/enrich'];

export interface Timed<T> {
  value: T;
  ms: number;
}

export async function timed<T>(work: () => Promise<T>): Promise<Timed<T>> {
  const start = performance.now();
  const value = await work();
  return { value, ms: performance.now() - start };
}

export interface Description {
  status: number;
  /** The parsed body, when it was JSON. */
  json: unknown;
}

/** The most of a service description read: far above any real one. */
const DESCRIPTION_MAX_BYTES = 8 * 1024 * 1024;

/** GET <prefix>/openapi.json, no key: reachability and the machine-readable description in one call. */
export async function fetchDescription(dispatcher: Dispatcher, prefix: string, timeoutMs: number): Promise<Description> {
  const answer = await exchange(
    dispatcher,
    { method: 'GET', path: `${prefix}/openapi.json`, headers: { accept: 'application/json' }, headersTimeout: timeoutMs, bodyTimeout: timeoutMs },
    { deadlineMs: 2 * timeoutMs, maxBytes: DESCRIPTION_MAX_BYTES },
    undefined,
  );
  try {
    return { status: answer.status, json: answer.text === null ? undefined : (JSON.parse(answer.text) as unknown) };
  } catch {
    return { status: answer.status, json: undefined };
  }
}

export function unreachable(origin: string, error: unknown): Check {
  const code = (error as { code?: string }).code ?? (error instanceof Error ? error.message : String(error));
  return fail('reachable', `cannot reach ${origin} (${code}): check ENRICH_BASE_URL, DNS, a firewall or proxy`, 'unavailable');
}

/** Operations marked with `x-availability` (spec 9.5: the description lists only callable ones). */
export function callableOperations(json: unknown): string[] {
  const paths = (json as { paths?: unknown } | undefined)?.paths;
  if (paths === null || typeof paths !== 'object') return [];
  const ops: string[] = [];
  for (const [path, item] of Object.entries(paths as Record<string, unknown>)) {
    for (const [method, op] of Object.entries((item ?? {}) as Record<string, unknown>)) {
      const availability = (op as Record<string, unknown> | null)?.['x-availability'];
      if (typeof availability === 'string') ops.push(`${method.toUpperCase()} ${path} (${availability})`);
    }
  }
  return ops;
}

export function endpointsCheck(description: Description): Check {
  const ops = callableOperations(description.json);
  if (description.status !== 200 || ops.length === 0) {
    return note('endpoints', `no machine-readable description with x-availability at openapi.json (HTTP ${description.status}); cannot list what is callable`);
  }
  const missing = NEEDED.filter((op) => !ops.some((o) => o.startsWith(`${op} `)));
  if (missing.length > 0) return fail('endpoints', `${missing.join(' and ')} not listed as callable (listed: ${ops.join(', ')}); enrich needs it`, 'failure');
  return ok('endpoints', `callable: ${ops.join(', ')}`);
}

/** The service's code as a terminal may show it: no escape sequences, never blank. */
const codeOf = (error: ApiError): string => printable(error.code) || '?';

export async function keyCheck(client: ServiceClient, samples: number[]): Promise<Check> {
  try {
    const { value, ms } = await timed(() => client.match(PROBE_DOMAIN));
    samples.push(ms);
    return ok('key', `accepted with scope search:read (a free match of ${PROBE_DOMAIN}: ${value.matched ? 'matched' : 'no match'}, 0 credits)`);
  } catch (error) {
    // The service's own code, as a batch run shows it (a key_suspended is not an invalid_token).
    if (error instanceof InvalidTokenError) return fail('key', `refused (401 ${codeOf(error)}): check ENRICH_API_KEY or --api-key-file`, 'auth');
    if (error instanceof InsufficientScopeError) return fail('key', `valid but lacks the search:read scope (403 ${codeOf(error)}): use a key that has it`, 'auth');
    if (error instanceof RateLimitedError) {
      // Past what a batch run waits out, it stops with exit 6: so does this check.
      if (error.retryAfterSeconds > (DEFAULT_RETRY_POLICY.maxRetryAfterSeconds ?? 0)) {
        return fail('key', `not checked: the service asks to wait ${formatWait(error.retryAfterSeconds)} (429 ${codeOf(error)}); a batch would stop too, rerun later`, 'unavailable');
      }
      return fail('key', `not checked: rate limited (429); run enrich doctor again in ${error.retryAfterSeconds}s`, 'failure');
    }
    if (error instanceof ConnectionError) return fail('key', `${error.message}: the service stopped answering`, 'unavailable');
    // Not the key's fault, and what a batch run would stop on with exit 6: the base URL, or the service.
    if (error instanceof NotServiceApiError) return fail('key', `not checked: ${error.message}`, 'unavailable');
    if (error instanceof ApiError && error.status >= 500) return fail('key', `not checked: the service answered ${error.status} ${codeOf(error)} to a free match; it is down or failing, try again later`, 'unavailable');
    if (error instanceof ApiError) return fail('key', `the service answered ${error.status} ${codeOf(error)} to a free match`, 'failure');
    throw error;
  }
}

export function latencyCheck(samples: readonly number[]): Check {
  if (samples.length === 0) return note('latency', 'no request answered');
  const sorted = [...samples].sort((a, b) => a - b);
  const median = sorted[Math.floor((sorted.length - 1) / 2)] as number;
  const ms = (v: number): string => (v < 1000 ? `${Math.max(1, Math.round(v))} ms` : duration(v));
  const n = count(samples.length, 'request');
  return ok('latency', `${ms(median)} median over ${n} (slowest ${ms(sorted[sorted.length - 1] as number)})`);
}

/** Free matches, four at a time, until the first 429 or `limit`: costs no credits, and reports what it saw rather than a rate (a burst allowance would overstate it). */
export async function rateProbe(client: ServiceClient, limit: number, samples: number[]): Promise<Check> {
  let sent = 0;
  let answered = 0;
  let limited: RateLimitedError | undefined;
  let other: ApiError | undefined;
  const start = performance.now();
  const worker = async (): Promise<void> => {
    while (limited === undefined && other === undefined && sent < limit) {
      sent++;
      try {
        samples.push((await timed(() => client.match(PROBE_DOMAIN))).ms);
        answered++;
      } catch (error) {
        if (!(error instanceof ApiError)) throw error;
        if (error instanceof RateLimitedError) limited ??= error;
        else other ??= error;
      }
    }
  };
  await Promise.all(Array.from({ length: 4 }, worker));
  const elapsed = duration(performance.now() - start).replace(/^0s$/, 'under 1s');
  if (other instanceof ConnectionError) return fail('rate', `${other.message} after ${count(answered, 'free match', 'free matches')}: the service stopped answering`, 'unavailable');
  if (other !== undefined) return note('rate', `stopped after ${count(answered, 'free match', 'free matches')}: the service answered ${other.status} ${codeOf(other)}`);
  if (limited === undefined) return ok('rate', `no 429 in ${count(answered, 'free match', 'free matches')} (${elapsed}); the ceiling is higher than this probe reached`);
  return ok('rate', `first 429 after ${count(answered, 'free match', 'free matches')} (${elapsed}), Retry-After ${limited.retryAfterSeconds}s; enrich paces itself under it`);
}

const fileSize = async (path: string): Promise<number> => (await stat(path).catch(() => null))?.size ?? 0;

/** Where the store is, and how big: the database and SQLite's -wal and -shm beside it. */
export async function storeCheck(path: string, folderProblem: string | null): Promise<Check> {
  const info = await stat(path).catch(() => null);
  if (info?.isDirectory() === true) return fail('store', `${path} is a directory; --store (or ENRICH_STORE) takes a file path`, 'usage');
  if (info !== null) {
    const bytes = (await Promise.all([path, `${path}-wal`, `${path}-shm`].map(fileSize))).reduce((a, b) => a + b, 0);
    return existingStoreCheck(path, formatBytes(bytes));
  }
  // A link to a store not made yet: SQLite creates the link's target, whose folder must be there.
  const link = await lstat(path).catch(() => null);
  if (link?.isSymbolicLink() === true) {
    const target = landsAt(path);
    if ((await stat(dirname(target)).catch(() => null))?.isDirectory() !== true) return fail('store', `${path} cannot be created: it is a link to ${target}, in a folder that does not exist`, 'usage');
  }
  // A batch makes only the default store's folder: a named one must be there already.
  if (folderProblem !== null) return fail('store', `${path} cannot be created: ${folderProblem}`, 'usage');
  let dir = dirname(path);
  // The deepest name there is, link or not: a dangling link or a file there is no folder to make the rest in.
  while ((await lstat(dir).catch(() => null)) === null && dirname(dir) !== dir) dir = dirname(dir);
  if ((await stat(dir).catch(() => null))?.isDirectory() !== true) return fail('store', `${path} cannot be created: ${dir} is not a folder`, 'usage');
  // Made and removed for real: access() says yes to root anywhere, and a folder may refuse what its bits allow (a read-only mount, /proc).
  const refused = await mkdtemp(join(dir, '.enrich-doctor-')).then(
    async (probe) => {
      await rm(probe, { recursive: true, force: true });
      return null;
    },
    (error: NodeJS.ErrnoException) => error.code ?? 'error',
  );
  if (refused !== null) return fail('store', `${path} cannot be created: ${dir} is not writable (${refused}); set ENRICH_STORE or pass --store <path>`, 'usage');
  return ok('store', `${path} (not created yet; the first run creates it)`);
}

/** A store that is there: opened read-only as a batch would (refusing an empty file, another database, a newer layout), then SQLite's integrity check. */
async function existingStoreCheck(path: string, size: string): Promise<Check> {
  const { Store } = await import('../store/sqlite/store.js');
  let store: ReturnType<typeof Store.open>;
  try {
    store = Store.open(path, { tool: 'enrich doctor', access: 'read' });
  } catch (error) {
    if (error instanceof EnrichError) return fail('store', error.message, error.kind);
    throw error;
  }
  try {
    const problems = store.integrityProblems();
    if (problems.length === 0) return ok('store', `${path} (${size}; SQLite's integrity check: ok)`);
    const named = problems.slice(0, 3).join('; ') + (problems.length > 3 ? '; ...' : '');
    return fail('store', `${path} is damaged (SQLite's integrity check: ${named}): move it aside and restore it from a backup; a batch would fail on it`, 'usage');
  } finally {
    store.close();
  }
}

export function formatBytes(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = bytes / 1024;
  let i = 0;
  for (; v >= 1024 && i < units.length - 1; i++) v /= 1024;
  return `${v.toFixed(1)} ${units[i] as string}`;
}
