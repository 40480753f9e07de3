import { hash } from 'node:crypto';

/**
 * Stable per purchase across every run sharing the store: store id, company, generation (a refresh is new work) and key version,
 * which moves on only when answers prove the key uncharged (keys.ts). Concurrent buyers of one company send the same key.
 */
export function idempotencyKey(storeId: string, domain: string, generation: number, version: number): string {
  // One-shot hash (Node 20.12+): a createHash object per key cost more than the digest itself.
  const digest = hash('sha256', domain, 'hex').slice(0, 24);
  return `enrich-${storeId}-${digest}-g${generation}-v${version}`;
}
