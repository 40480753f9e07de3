import { serviceEndpoint } from '../api/endpoint.js';
import type { ErrorKind } from '../errors.js';
import type { SandboxOptions } from '../sandbox/index.js';
import { isTeamStore } from '../store/path.js';
import { VERSION } from '../version.js';
import {
  endpointsCheck,
  fail,
  fetchDescription,
  keyCheck,
  latencyCheck,
  note,
  ok,
  rateProbe,
  storeCheck,
  timed,
  unreachable,
  type Check,
  type Description,
} from './doctor-checks.js';

/** What to check. The cli resolves flags into this without refusing: a refusal is a line here. */
export interface DoctorOptions {
  service:
    | { kind: 'sandbox'; options: SandboxOptions }
    | {
        kind: 'remote';
        /** The checked URL, or why there is none (missing, not a URL, plain http to another host). */
        address: { ok: true; url: string } | { ok: false; problem: string };
        key: { ok: true; value: string } | { ok: false; problem: string };
      };
  /** A file path (SQLite), or a postgres:// address (the team store). */
  storePath: string;
  /** What is wrong with a named store's folder (it must exist, as for a batch), or null. */
  storeFolder: string | null;
  /** Why --store or ENRICH_STORE names no store (an SQLite URI, :memory:, an address that does not parse), or null. */
  storeProblem: string | null;
  /** Free matches to send looking for the rate ceiling; null: do not probe. */
  probeRate: number | null;
  timeoutMs: number;
  /** The report as one JSON object (snake_case, as every JSON this tool writes). */
  json?: boolean;
}

function addressLine(url: string): Check {
  const u = new URL(url);
  return ok('address', u.protocol === 'https:' ? url : `${url} (plain http: allowed only because ${u.hostname} is this machine)`);
}

/** Any answer means something is there; a 5xx (a gateway's 502/503) means the service is down, which a batch would meet as "unavailable" too. */
function reachableCheck(origin: string, status: number): Check {
  if (status >= 500) return fail('reachable', `${origin} answered HTTP ${status}: the service is down or failing behind its gateway; try again later`, 'unavailable');
  return ok('reachable', `${origin} answered (HTTP ${status})`);
}

/** The service checks, in the order a person would fix them; each stops at the first it cannot pass. */
async function serviceChecks(url: string, apiKey: string | { problem: string }, options: DoctorOptions): Promise<Check[]> {
  const { createClient, createDispatcher } = await import('../api/client.js');
  const { origin, prefix } = serviceEndpoint(url);
  const dispatcher = createDispatcher(url, 4);
  const checks: Check[] = [addressLine(url)];
  const samples: number[] = [];
  try {
    let description: Description;
    try {
      const answer = await timed(() => fetchDescription(dispatcher, prefix, options.timeoutMs));
      description = answer.value;
      samples.push(answer.ms);
    } catch (error) {
      return [...checks, unreachable(origin, error)];
    }
    checks.push(reachableCheck(origin, description.status));
    if (typeof apiKey !== 'string') return [...checks, fail('key', apiKey.problem, 'usage'), endpointsCheck(description)];
    const client = createClient({ baseUrl: url, apiKey, dispatcher, userAgent: `enrich/${VERSION} doctor`, timeoutMs: options.timeoutMs });
    const key = await keyCheck(client, samples);
    // No description and no service API at the match either: the base path is wrong, the reachable row's to say, not the key's.
    if (description.status === 404 && key.status === 'fail' && key.kind === 'unavailable') {
      checks[checks.length - 1] = fail('reachable', `${origin} answers, but not as the service API (HTTP 404 at ${prefix}/openapi.json and the match endpoint): check the base path in ENRICH_BASE_URL`, 'unavailable');
      checks.push(note('key', 'not checked: no service API at this address'));
      return [...checks, latencyCheck(samples)];
    }
    checks.push(key, endpointsCheck(description));
    if (key.status === 'ok' && options.probeRate !== null) checks.push(await rateProbe(client, options.probeRate, samples));
    checks.push(latencyCheck(samples));
    return checks;
  } finally {
    await dispatcher.close();
  }
}

async function allChecks(options: DoctorOptions): Promise<Check[]> {
  const s = options.service;
  if (s.kind === 'sandbox') {
    const { startSandbox } = await import('../sandbox/index.js');
    const sandbox = await startSandbox(s.options);
    try {
      return [note('sandbox', 'embedded, started for this check'), ...(await serviceChecks(sandbox.url, sandbox.keys[0] as string, options))];
    } finally {
      await sandbox.close();
    }
  }
  // Every setting that is missing is said at once, not one per run of doctor.
  if (!s.address.ok) return [fail('address', s.address.problem, 'usage'), ...(s.key.ok ? [] : [fail('key', s.key.problem, 'usage')])];
  return serviceChecks(s.address.url, s.key.ok ? s.key.value : { problem: s.key.problem }, options);
}

/** The report: one aligned line per check, then a verdict. */
export function formatReport(checks: readonly Check[]): string {
  const width = Math.max(...checks.map((c) => c.label.length));
  const mark = { ok: 'ok  ', note: 'note', fail: 'FIX ' } as const;
  const failures = checks.filter((c) => c.status === 'fail').length;
  const verdict = failures === 0 ? 'enrich doctor: all ok' : `enrich doctor: ${failures} to fix`;
  return [...checks.map((c) => `  ${c.label.padEnd(width)}  ${mark[c.status]}  ${c.text}`), verdict, ''].join('\n');
}

/** `doctor --json`: every check with its status and text, and whether all passed. */
export function jsonReport(checks: readonly Check[]): string {
  const rows = checks.map((c) => ({ check: c.label, status: c.status === 'fail' ? 'fix' : c.status, text: c.text }));
  return `${JSON.stringify({ ok: checks.every((c) => c.status !== 'fail'), to_fix: checks.filter((c) => c.status === 'fail').length, checks: rows }, null, 2)}\n`;
}

async function storeChecks(options: DoctorOptions): Promise<Check[]> {
  if (options.storeProblem !== null) return [fail('store', options.storeProblem, 'usage')];
  if (!isTeamStore(options.storePath)) return [await storeCheck(options.storePath, options.storeFolder)];
  // Loaded only for a team store, as a batch loads the PostgreSQL driver.
  const { teamStoreChecks } = await import('./doctor-team.js');
  return teamStoreChecks(options.storePath);
}

/** `enrich doctor`: whether a batch would work here, one line per check. Null when all pass, else the first failure's kind (its exit code). */
export async function runDoctor(options: DoctorOptions, out: NodeJS.WritableStream): Promise<ErrorKind | null> {
  const checks = [...(await allChecks(options)), ...(await storeChecks(options))];
  out.write(options.json === true ? jsonReport(checks) : formatReport(checks));
  return checks.find((c) => c.status === 'fail')?.kind ?? null;
}
