import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { Accounts, type KeyConfig, type LedgerEntry } from './accounts.js';
import { CompanyDirectory, DEFAULT_COMPANIES } from './directory.js';
import { createHandler, type IdempotencyMode, type ReplayRequestId, type SandboxStats } from './handler.js';
import { openapiDocument } from './openapi.js';
import { fixedLatency, latencySampler, type LatencySpec } from './latency.js';
import { mulberry32 } from './random.js';

export type { KeyConfig, LedgerEntry } from './accounts.js';
export type { IdempotencyMode, ReplayRequestId } from './handler.js';
export { CompanyDirectory } from './directory.js';
export type { LatencySpec } from './latency.js';

export interface SandboxOptions {
  host?: string;
  /** 0 (the default) picks a free port. */
  port?: number;
  /** Default: one full-scope key, generated. */
  keys?: readonly KeyConfig[];
  /** Starting balance of every key that does not set its own. Default 10,000. */
  balance?: number;
  /** Requests a second per key, free calls included; null or 0 for none (the default). */
  rateLimit?: number | null;
  /** Token bucket size; default one second of `rateLimit`. */
  burst?: number;
  /** The token bucket's clock tick, ms: 1 is a gateway counting whole milliseconds. Default 0 (exact). */
  clockTickMs?: number;
  /** Count requests per fixed window of this many ms (`rateLimit` x window each) instead of a bucket. */
  fixedWindowMs?: number;
  /** Share of company calls answered 500, 0..1. Default 0. */
  failRate?: number;
  /** A fixed delay before each company answer, ms; `latency` draws it from a distribution instead. */
  latencyMs?: number;
  latency?: LatencySpec;
  /** Share of company answers lost after executing (connection reset), 0..1. Default 0. */
  dropRate?: number;
  /** Seeds the fault injection and the latency draws so a run can be replayed. Default 1. */
  seed?: number;
  directory?: CompanyDirectory;
  /** Monotonic clock in ms, for the token buckets (tests drive it). */
  now?: () => number;
  typeBase?: string;
  /** What an Idempotency-Key stores: `spec` (default) only 200s, `stripe` every executed outcome. */
  idempotency?: IdempotencyMode;
  /** Which request id a replay carries (default `original`, the executed call's). */
  replayRequestId?: ReplayRequestId;
}

export interface Sandbox {
  readonly url: string;
  readonly keys: readonly string[];
  readonly directory: CompanyDirectory;
  readonly stats: SandboxStats;
  /** What was charged to a key, one entry per charge, in order. */
  ledger(key: string): readonly LedgerEntry[];
  /** Credits charged to a key per canonical domain. */
  chargesByDomain(key: string): Map<string, number>;
  balance(key: string): number;
  topUp(key: string, credits: number): number;
  setFailRate(rate: number): void;
  setDropRate(rate: number): void;
  setLatency(ms: number): void;
  close(): Promise<void>;
}

export const DEFAULT_TYPE_BASE = 'https://sandbox.enrich.example/problems';

let sharedDirectory: CompanyDirectory | undefined;
/** The fixture set is read once per process; tests start many sandboxes. */
export function defaultDirectory(): CompanyDirectory {
  sharedDirectory ??= CompanyDirectory.fromJsonl(DEFAULT_COMPANIES);
  return sharedDirectory;
}

export function generateKey(): string {
  return `sk_sandbox_${randomBytes(12).toString('hex')}`;
}

export async function startSandbox(options: SandboxOptions = {}): Promise<Sandbox> {
  const now = options.now ?? (() => performance.now());
  const keys = options.keys ?? [{ key: generateKey() }];
  const directory = options.directory ?? defaultDirectory();
  const limit = { rate: options.rateLimit ?? null, burst: options.burst, tickMs: options.clockTickMs, windowMs: options.fixedWindowMs };
  const accounts = new Accounts(keys, options.balance ?? 10_000, limit, now());
  // Latency draws from a stream of their own: the faults a seed gives stay the same whatever the latency.
  const latencyRandom = mulberry32(((options.seed ?? 1) ^ 0x5bd1e995) >>> 0);
  let latency = latencySampler(options.latency ?? fixedLatency(options.latencyMs ?? 0), latencyRandom);
  const stats: SandboxStats = { requests: 0, byStatus: {}, replays: 0, dropped: 0, firstAt: 0, lastAt: 0, matchCalls: new Map(), enrichCalls: new Map() };
  let url = '';
  let openapi: string | undefined;
  const config = {
    directory,
    accounts,
    failRate: options.failRate ?? 0,
    latency: () => latency(),
    dropRate: options.dropRate ?? 0,
    random: mulberry32(options.seed ?? 1),
    now,
    typeBase: options.typeBase ?? DEFAULT_TYPE_BASE,
    idempotency: options.idempotency ?? 'spec',
    replayRequestId: options.replayRequestId ?? 'original',
    openapi: () => (openapi ??= JSON.stringify(openapiDocument(url))),
    stats,
  };
  const server: Server = createServer({ keepAlive: true }, createHandler(config));
  server.keepAliveTimeout = 30_000;

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  url = `http://${host}:${address.port}`;

  return {
    url,
    keys: keys.map((k) => k.key),
    directory,
    stats,
    ledger: (key) => accounts.get(key).ledger,
    chargesByDomain: (key) => {
      const totals = new Map<string, number>();
      for (const e of accounts.get(key).ledger) totals.set(e.domain, (totals.get(e.domain) ?? 0) + e.credits);
      return totals;
    },
    balance: (key) => accounts.get(key).balance,
    topUp: (key, credits) => (accounts.get(key).balance += credits),
    setFailRate: (rate) => {
      config.failRate = rate;
    },
    setDropRate: (rate) => {
      config.dropRate = rate;
    },
    setLatency: (ms) => {
      latency = latencySampler(fixedLatency(ms), latencyRandom);
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
