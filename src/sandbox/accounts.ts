import { TokenBucket } from './token-bucket.js';

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
  readonly bucket: TokenBucket | null;
  readonly ledger: LedgerEntry[];
  readonly idempotency: Map<string, StoredResponse>;
}

export interface RateLimitConfig {
  /** Requests a second per key; null for no limit. */
  rate: number | null;
  /** Bucket size; defaults to one second's worth of requests. */
  burst?: number | undefined;
}

export class Accounts {
  private readonly byKey = new Map<string, Account>();
  private seq = 0;

  constructor(keys: readonly KeyConfig[], defaultBalance: number, limit: RateLimitConfig, now: number) {
    for (const k of keys) {
      const rate = limit.rate;
      this.byKey.set(k.key, {
        scopes: new Set(k.scopes ?? [SCOPE]),
        revoked: k.revoked ?? false,
        balance: k.balance ?? defaultBalance,
        bucket: rate === null || rate <= 0 ? null : new TokenBucket(rate, Math.max(1, limit.burst ?? rate), now),
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
