/**
 * A run in a process of its own, for the store contract's cross-process cases:
 *   race <backend> <where> <count>: on "go" (stdin), claims companies c0..c<count-1>; buys each
 *     claim it gets, waits out each busy one until it is held; prints {"bought": [...], "held": n}.
 *   hang <backend> <where> <count>: claims them, prints "claimed", and waits to be killed.
 */
import { PgStore } from '../../src/store/postgres/store.js';
import { Store } from '../../src/store/sqlite/store.js';
import type { ServiceStore } from '../../src/store/types.js';

const [mode, backend, where, countText] = process.argv.slice(2);
const count = Number(countText);
const info = { inputName: 'in.csv', inputSha256: 'x', rows: count, dryRun: false, options: {} };
const records: ServiceStore =
  backend === 'postgres' ? await (await PgStore.open(where as string, { tool: 'racer' })).beginRun('svc', info) : Store.open(where as string, { tool: 'racer' }).beginRun('svc', info);
const companies = Array.from({ length: count }, (_, i) => `c${i}.com`);
const intent = (c: string) => ({ type: 'intent' as const, company: c, generation: 1, keyVersion: 1, key: `k-${c}` });

if (mode === 'hang') {
  await Promise.all(companies.map((c) => records.append(intent(c), true)));
  process.stdout.write('claimed\n');
  setInterval(() => {}, 1_000);
} else {
  process.stdout.write('ready\n');
  await new Promise((resolve) => process.stdin.once('data', resolve));
  const bought: string[] = [];
  let held = 0;
  const wait = (c: string): Promise<unknown> =>
    'waitForOutcome' in records ? (records as unknown as { waitForOutcome(c: string, ms: number): Promise<unknown> }).waitForOutcome(c, 50) : new Promise((r) => setTimeout(r, 5));
  const buy = async (c: string): Promise<void> => {
    for (;;) {
      const claim = await records.append(intent(c), true);
      if (claim.kind === 'ok') {
        bought.push(c);
        await records.append({ type: 'enrich', company: c, generation: 1, keyVersion: 1, status: 'hit', charged: 1, record: { domain: c, name: c, specialties: [] } as never, keyUsed: `k-${c}` });
        return;
      }
      if (claim.kind === 'held') {
        held++;
        return;
      }
      if (claim.kind !== 'busy') throw new Error(`unexpected claim ${JSON.stringify(claim)}`);
      await wait(c);
    }
  };
  // 50 at a time, as the pipeline's concurrency would.
  let next = 0;
  await Promise.all(Array.from({ length: 50 }, async () => {
    while (next < companies.length) await buy(companies[next++] as string);
  }));
  await records.close();
  await records.releaseClaims();
  await records.endRun({ status: 'done', credits: bought.length, bought: bought.length, reused: held });
  process.stdout.write(`${JSON.stringify({ bought, held })}\n`);
  process.exit(0);
}
