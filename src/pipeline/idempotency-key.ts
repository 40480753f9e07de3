import { hash } from 'node:crypto';

/**
 * Stable per purchase across every run that shares the store: the store's identity, the company,
 * the purchase generation (a refresh is a new unit of work), and the key version, which moves on
 * only when the service's answers prove the current key uncharged (pipeline/keys.ts). Two
 * processes buying the same company at the same moment send the same key. The domain is hashed
 * to keep keys short and uniform.
 */
export function idempotencyKey(storeId: string, domain: string, generation: number, version: number): string {
  // One-shot hash (Node 20.12+): a createHash object per key cost more than the digest itself.
  const digest = hash('sha256', domain, 'hex').slice(0, 24);
  return `enrich-${storeId}-${digest}-g${generation}-v${version}`;
}
