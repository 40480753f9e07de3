import { createHash } from 'node:crypto';

/**
 * Stable per purchase across every run that shares the store: the store's identity, the company,
 * the purchase generation (a refresh is a new unit of work), and the key version, which moves on
 * only when the service's answers prove the current key uncharged (pipeline/keys.ts). Two
 * processes buying the same company at the same moment send the same key. The domain is hashed
 * to keep keys short and uniform.
 */
export function idempotencyKey(storeId: string, domain: string, generation: number, version: number): string {
  const digest = createHash('sha256').update(domain).digest('hex').slice(0, 24);
  return `enrich-${storeId}-${digest}-g${generation}-v${version}`;
}
