import { FixedWindow, TokenBucket, type RateGate } from './token-bucket.js';

export const SCOPE = 'search:read';

export interface KeyConfig {
  key: string;
  /** Default: ['search:read']. */
  scopes?: readonly string[];
  /** Default: the sandbox's `balance` option. */
  balance?: number;
  /** A revoked key answers exactly like an unknown one (spec 5.4). */
  revoked?: boolean;
}

export interface LedgerEntry {
  seq: number;
  at: string;
  domain: string;
  credits: number;
  idempotencyKey: string | null;
  requestId: string;
}

export interface StoredResponse {
  fingerprint: string;
  status: number;
  contentType: string;
  body: string;
  /** The request id of the call that executed, for replays that carry it again. */
  requestId: string;
}

export interface Account {
  readonly scopes: ReadonlySet<string>;
  readonly revoked: boolean;
  balance: number;
  /** The key's rate limit (a token bucket, or a fixed-window counter); null: none. */
  readonly gate: RateGate | null;
  readonly ledger: LedgerEntry[];
  readonly idempotency: Map<string, StoredResponse>;
}

export interface RateLimitConfig {
  /** Requests a second per key; null for no limit. */
  rate: number | null;
  /** Bucket size; defaults to one second's worth of requests. */
  burst?: number | undefined;
  /** The bucket's clock tick, ms (0 or unset: exact). */
  tickMs?: number | undefined;
  /** Count per fixed window of this many ms instead of a bucket: `rate` x window a window. */
  windowMs?: number | undefined;
}

/** The gate a key's limit config asks for, or null for no limit. */
export function rateGate(limit: RateLimitConfig, now: number): RateGate | null {
  const rate = limit.rate;
  if (rate === null || rate <= 0) return null;
  if (limit.windowMs !== undefined && limit.windowMs > 0) return new FixedWindow(Math.max(1, Math.round((rate * limit.windowMs) / 1000)), limit.windowMs);
  return new TokenBucket(rate, Math.max(1, limit.burst ?? rate), now, limit.tickMs ?? 0);
}

export class Accounts {
  private readonly byKey = new Map<string, Account>();
  private seq = 0;

  constructor(keys: readonly KeyConfig[], defaultBalance: number, limit: RateLimitConfig, now: number) {
    for (const k of keys) {
      this.byKey.set(k.key, {
        scopes: new Set(k.scopes ?? [SCOPE]),
        revoked: k.revoked ?? false,
        balance: k.balance ?? defaultBalance,
        gate: rateGate(limit, now),
        ledger: [],
        idempotency: new Map(),
      });
    }
  }

  /** The account for a usable key, or undefined for missing, malformed, unknown and revoked alike. */
  authenticate(authorization: string | undefined): Account | undefined {
    if (authorization === undefined) return undefined;
    const match = /^Bearer +(\S+) *$/i.exec(authorization);
    if (match === null) return undefined;
    const account = this.byKey.get(match[1] as string);
    return account === undefined || account.revoked ? undefined : account;
  }

  get(key: string): Account {
    const account = this.byKey.get(key);
    if (account === undefined) throw new Error('unknown sandbox key');
    return account;
  }

  charge(account: Account, domain: string, idempotencyKey: string | null, requestId: string, at: Date): void {
    account.balance -= 1;
    account.ledger.push({ seq: ++this.seq, at: at.toISOString(), domain, credits: 1, idempotencyKey, requestId });
  }
}
