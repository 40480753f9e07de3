// The best a client can do against a small bucket on this machine, for the bench to quote beside
// enrich: it is told the ceiling (enrich has to learn it), sends every request one fixed interval
// after the last, timed to the fraction of a millisecond (a timer, then event-loop turns), over
// undici keep-alive connections, and retries a 429 after its Retry-After in the same schedule.
// What it cannot remove is jitter on the way: a one-token bucket refuses a request that arrives
// even slightly early, and any delay of one request brings the next one early.
// Usage: node baseline-paced.mjs <in.csv> <interval ms>, with ENRICH_BASE_URL and ENRICH_API_KEY.
import { readFileSync } from 'node:fs';
import { Pool } from 'undici';

const [input, intervalArg] = process.argv.slice(2);
const interval = Number(intervalArg);
const base = new URL(process.env.ENRICH_BASE_URL);
const prefix = `${base.pathname.replace(/\/$/, '')}/api/v1/public`;
const headers = { authorization: `Bearer ${process.env.ENRICH_API_KEY}` };
const domains = [...new Set(readFileSync(input, 'utf8').split(/\r?\n/).slice(1).filter(Boolean))];
const pool = new Pool(base.origin, { connections: 64 });

let last = performance.now();
/** Resolves at the next slot: one interval after the last request left, never earlier. */
async function slot() {
  const at = Math.max(performance.now(), last + interval);
  last = at;
  for (;;) {
    const left = at - performance.now();
    if (left <= 0) return;
    if (left > 1.5) await new Promise((r) => setTimeout(r, left - 1.5));
    else await new Promise((r) => setImmediate(r));
  }
}

async function call(method, path, body) {
  for (;;) {
    await slot();
    const res = await pool.request({ method, path: `${prefix}${path}`, headers: body ? { ...headers, 'content-type': 'application/json', 'idempotency-key': `paced-${process.pid}-${body}` } : headers, body: body ? JSON.stringify({ domain: body }) : null });
    const json = await res.body.json();
    if (res.statusCode === 429) {
      await new Promise((r) => setTimeout(r, Number(res.headers['retry-after'] ?? 1) * 1000));
      continue;
    }
    if (res.statusCode >= 500) continue;
    return json;
  }
}

let next = 0;
async function worker() {
  while (next < domains.length) {
    const domain = domains[next++];
    const m = await call('GET', `/company/match?domain=${encodeURIComponent(domain)}`);
    if (m.matched) await call('POST', '/company/enrich', m.company.domain);
  }
}
// Enough workers that the schedule, not the round trips, sets the pace.
await Promise.all(Array.from({ length: 16 }, worker));
await pool.close();
