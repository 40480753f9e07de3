/**
 * 9. What each kept speed mechanism buys (issue 20: each shows at least 10% on a figure the project
 * tracks beside its removal, or it goes), every pair measured interleaved in the same run:
 *
 *   - the scan cache (src/io/scan-cache.ts): a rerun of a large input, beside the same rerun with
 *     the cache file removed first (so that run also writes it again: a few per cent of its time);
 *   - the writer thread (src/store/sqlite/write-channel.ts): a full run, beside ENRICH_STORE_WRITER=inline;
 *   - the heap tuning (src/heap.ts): the same full run's peak, beside Node started with V8's own
 *     heap growth and young generation (the flags a user's own choice would give; tuneHeap then stands back);
 *   - the undici dispatch handler (src/api/exchange.ts): the client's CPU for the same requests,
 *     beside undici's request() doing the same job (test/bench/exchange-request.ts).
 */
import { readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { createDispatcher } from '../../src/api/client.js';
import { exchange, type Answer, type ExchangeLimits } from '../../src/api/exchange.js';
import { writeInput } from './data.js';
import { exchangeByRequest } from './exchange-request.js';
import { BIN, fmt, median, runMeasured, sandboxServer, type Measured } from './lib.js';

type Say = (line: string) => void;

/** `rounds` interleaved A B pairs (B first every other round); each side's runs. */
async function pairs(rounds: number, a: () => Promise<Measured>, b: () => Promise<Measured>): Promise<[Measured[], Measured[]]> {
  const as: Measured[] = [];
  const bs: Measured[] = [];
  for (let i = 0; i < rounds; i++) {
    const order = i % 2 === 0 ? [a, b] : [b, a];
    for (const run of order) {
      const m = await run();
      if (m.code !== 0) throw new Error(`mechanisms: a run exited ${m.code}: ${m.stderr}`);
      (run === a ? as : bs).push(m);
    }
  }
  return [as, bs];
}

const wall = (ms: Measured[]): number => median(ms.map((m) => m.wallMs));
const peak = (ms: Measured[]): number => median(ms.map((m) => m.peakMiB));
/** Median of the per-pair ratios without/with, and their range. */
function ratio(without: Measured[], kept: Measured[], of: (m: Measured) => number = (m) => m.wallMs): string {
  const rs = without.map((m, i) => of(m) / of(kept[i] as Measured));
  return `${fmt(median(rs), 2)}x (pairs ${fmt(Math.min(...rs), 2)}-${fmt(Math.max(...rs), 2)})`;
}

export async function mechanisms(say: Say, work: string, quick: boolean): Promise<void> {
  const server = await sandboxServer();
  const env = { ENRICH_BASE_URL: server.url, ENRICH_API_KEY: 'sk_bench', XDG_CACHE_HOME: join(work, 'cache') };
  const run = (input: string, store: string, extra: Record<string, string> = {}, before?: () => void, nodeFlags: string[] = []) => (): Promise<Measured> => {
    before?.();
    return runMeasured(process.execPath, [...nodeFlags, BIN, input, '-o', join(work, 'mechanisms.out.csv'), '--quiet', '--store', store], { ...env, ...extra });
  };
  try {
    say('9. speed mechanisms, each beside its removal (interleaved pairs; without / with, so above 1.10 pays its way):');

    // The scan cache: a rerun of a large input reads the cache instead of parsing the input again.
    const rows = quick ? 100_000 : 1_000_000;
    const big = join(work, 'mechanisms-big.csv');
    await writeInput(big, rows, 50_000);
    const bigStore = join(work, 'mechanisms-big.db');
    await run(big, bigStore)();
    const scans = join(work, 'scans');
    const forget = (): void => {
      for (const name of readdirSync(scans)) if (name.endsWith('.scan')) rmSync(join(scans, name));
    };
    const [scanned, rescanned] = await pairs(quick ? 2 : 3, run(big, bigStore), run(big, bigStore, {}, forget));
    say(`   scan cache, a ${fmt(rows)}-row rerun: ${fmt(wall(scanned) / 1000, 2)} s with, ${fmt(wall(rescanned) / 1000, 2)} s without: ${ratio(rescanned, scanned)}`);

    // The writer thread: a full run, every company bought, on a fresh store each time.
    const domains = quick ? 5_000 : 20_000;
    const full = join(work, 'mechanisms-full.csv');
    await writeInput(full, domains, domains);
    let stores = 0;
    const fresh = (extra: Record<string, string>) => (): Promise<Measured> => run(full, join(work, `mechanisms-full-${stores++}.db`), extra)();
    const [thread, inline] = await pairs(quick ? 2 : 3, fresh({}), fresh({ ENRICH_STORE_WRITER: 'inline' }));
    say(`   writer thread, a full run of ${fmt(domains)} rows: ${fmt(wall(thread) / 1000, 2)} s, ${fmt(peak(thread), 0)} MiB with; ${fmt(wall(inline) / 1000, 2)} s, ${fmt(peak(inline), 0)} MiB inline: wall ${ratio(inline, thread)}, peak ${ratio(inline, thread, (m) => m.peakMiB)}`);

    // The heap tuning: the same full run started with V8's own growth and young generation.
    const v8Own = ['--heap-growing-percent=0', '--max-semi-space-size=16'];
    const freshFlags = (flags: string[]) => (): Promise<Measured> => run(full, join(work, `mechanisms-full-${stores++}.db`), {}, undefined, flags)();
    const [tuned, untuned] = await pairs(quick ? 2 : 3, freshFlags([]), freshFlags(v8Own));
    say(`   heap tuning, the same run: ${fmt(peak(tuned), 0)} MiB, ${fmt(wall(tuned) / 1000, 2)} s with; ${fmt(peak(untuned), 0)} MiB, ${fmt(wall(untuned) / 1000, 2)} s without: peak ${ratio(untuned, tuned, (m) => m.peakMiB)}, wall ${ratio(untuned, tuned)}`);

    // The dispatch handler: the client's own CPU for the same requests, in this process.
    const requests = quick ? 5_000 : 20_000;
    const [handler, request] = await clientCpu(server.url, requests, quick ? 2 : 4);
    const rs = request.map((r, i) => r / (handler[i] as number));
    say(`   undici dispatch handler, ${fmt(requests)} matches at 32 in flight: ${fmt(median(handler), 0)} ms of client CPU with, ${fmt(median(request), 0)} ms with undici's request(): ${fmt(median(rs), 2)}x (rounds ${fmt(Math.min(...rs), 2)}-${fmt(Math.max(...rs), 2)})`);
  } finally {
    await server.stop();
  }
}

/** Client CPU ms (user + system) for `requests` matches, by each way of sending, alternating. */
async function clientCpu(url: string, requests: number, rounds: number): Promise<[number[], number[]]> {
  type Send = (dispatcher: ReturnType<typeof createDispatcher>, options: Parameters<typeof exchange>[1], limits: ExchangeLimits) => Promise<Answer>;
  const ways: Send[] = [(d, o, l) => exchange(d, o, l, undefined), (d, o, l) => exchangeByRequest(d, o, l, undefined)];
  const limits: ExchangeLimits = { deadlineMs: 60_000, maxBytes: 1024 * 1024 };
  const times: [number[], number[]] = [[], []];
  for (let round = 0; round < rounds; round++) {
    for (const k of round % 2 === 0 ? [0, 1] : [1, 0]) {
      const dispatcher = createDispatcher(url, 32);
      let next = 0;
      const worker = async (): Promise<void> => {
        while (next < requests) {
          const i = next++;
          const path = `/api/v1/public/company/match?domain=unknown-${i}.com`;
          const answer = await (ways[k] as Send)(dispatcher, { method: 'GET', path, headers: { authorization: 'Bearer sk_bench' } }, limits);
          if (answer.status !== 200) throw new Error(`mechanisms: a match answered ${answer.status}`);
        }
      };
      const before = process.cpuUsage();
      await Promise.all(Array.from({ length: 32 }, worker));
      const used = process.cpuUsage(before);
      times[k as 0 | 1].push((used.user + used.system) / 1000);
      await dispatcher.close();
    }
  }
  return times;
}
