// The baseline the CLI is measured against: what a careful engineer writes in an afternoon.
// Node's built-in fetch (keep-alive by default), 16 workers, match then enrich per domain,
// Retry-After honoured on 429, no journal. Usage: node baseline-fetch.mjs <in.csv> <out.csv>
// with ENRICH_BASE_URL and ENRICH_API_KEY set; the input is a "domain" column, one per line.
import { readFileSync, writeFileSync } from 'node:fs';

const [input, output] = process.argv.slice(2);
const base = `${process.env.ENRICH_BASE_URL}/api/v1/public`;
const headers = { authorization: `Bearer ${process.env.ENRICH_API_KEY}` };
const rows = readFileSync(input, 'utf8').split(/\r?\n/).slice(1).filter(Boolean);
const domains = [...new Set(rows.map((r) => r.trim().toLowerCase()))];
const results = new Map();

async function call(url, init) {
  for (;;) {
    const res = await fetch(url, { ...init, headers: { ...headers, ...init?.headers } });
    const body = await res.json();
    if (res.status === 429) {
      await new Promise((r) => setTimeout(r, Number(res.headers.get('retry-after') ?? 1) * 1000));
      continue;
    }
    if (res.status >= 500) continue;
    return body;
  }
}

let next = 0;
async function worker() {
  while (next < domains.length) {
    const domain = domains[next++];
    const m = await call(`${base}/company/match?domain=${encodeURIComponent(domain)}`);
    if (!m.matched) {
      results.set(domain, ['no_match', '']);
      continue;
    }
    const e = await call(`${base}/company/enrich`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': `baseline-${process.pid}-${m.company.domain}` },
      body: JSON.stringify({ domain: m.company.domain }),
    });
    results.set(domain, ['matched', e.company?.name ?? '']);
  }
}
await Promise.all(Array.from({ length: 16 }, worker));
writeFileSync(output, ['domain,status,name', ...rows.map((r) => [r, ...(results.get(r.trim().toLowerCase()) ?? ['', ''])].join(','))].join('\n') + '\n');
