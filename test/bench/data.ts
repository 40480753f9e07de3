import { createWriteStream, readFileSync, writeFileSync } from 'node:fs';
import { once } from 'node:events';
import { mulberry32 } from '../../src/sandbox/random.js';

interface FixtureCompany {
  domain: string;
  aliases: string[];
  name: string;
}

export function fixtureCompanies(): FixtureCompany[] {
  return readFileSync(new URL('../../fixtures/companies.jsonl', import.meta.url), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as FixtureCompany);
}

/**
 * `count` unique domains: `hits` fixture companies (from the `from`th on), the rest unknown to the
 * service (named `unlisted-<n>`, or `<prefix>-<n>`), shuffled.
 */
export function uniqueDomainsCsv(path: string, count: number, hits: number, from = 0, prefix = 'unlisted'): void {
  const known = fixtureCompanies().map((c) => c.domain).slice(from, from + hits);
  const all = [...known, ...Array.from({ length: count - known.length }, (_, i) => `${prefix}-${i.toString(36)}.com`)];
  // Fisher-Yates on a seeded generator. Until 2026-11-27 j was (i * 7919 + 13) % (i + 1), which
  // is i - 7905 for most i: no shuffle at all, the companies in one block in the middle of the
  // input (a run matched 7,000 misses, bought 6,000 companies in a row, then matched the rest).
  const random = mulberry32(count * 31 + hits);
  for (let i = all.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [all[i], all[j]] = [all[j] as string, all[i] as string];
  }
  writeFileSync(path, `domain\n${all.join('\n')}\n`);
}

/**
 * A CRM-like export: `rows` rows whose website column is drawn from `universe` distinct
 * registrable domains (fixture companies and their aliases, the rest unknown to the service),
 * written under messy spellings (URLs, www, case), with an id, a name and a notes column.
 */
export async function writeInput(path: string, rows: number, universe: number, seed = 7): Promise<void> {
  const random = mulberry32(seed);
  const companies = fixtureCompanies();
  const known = companies.flatMap((c) => [c.domain, ...c.aliases]);
  const domains: string[] = [];
  for (let i = 0; i < universe; i++) domains.push(i < known.length && i % 2 === 0 ? (known[i] as string) : `prospect-${i.toString(36)}.com`);
  const out = createWriteStream(path);
  const write = async (s: string): Promise<void> => {
    if (!out.write(s)) await once(out, 'drain');
  };
  await write('Account ID,Account Name,Website,Notes\r\n');
  for (let r = 0; r < rows; r++) {
    const d = domains[r < universe ? r : Math.floor(random() * universe)] as string;
    const spelling = r % 3 === 0 ? `https://www.${d}/about` : r % 3 === 1 ? d.toUpperCase() : d;
    await write(`${100000 + r},"Account ${r}, Inc.",${spelling},${r % 5 === 0 ? '"met at expo, ""warm"""' : ''}\r\n`);
  }
  out.end();
  await once(out, 'finish');
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const [path, rows, universe] = process.argv.slice(2);
  await writeInput(path as string, Number(rows), Number(universe));
}
