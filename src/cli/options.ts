import { readFile, stat } from 'node:fs/promises';
import { resolve } from 'node:path';
import { UsageError } from '../errors.js';
import type { RunOptions, ServiceTarget } from '../commands/run.js';
import type { OutputFormat } from '../io/output.js';
import type { RunFlags } from './program.js';

/** What `--sandbox` starts: a realistic service (rate limited, a little flaky) with credits to spare. */
export const EMBEDDED_SANDBOX = { balance: 10_000, rateLimit: 100, latencyMs: 20, failRate: 0.02, seed: 1 } as const;

const LOOPBACK = /^(localhost|127(\.\d{1,3}){3}|\[::1\])$/i;

export function checkBaseUrl(raw: string): string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new UsageError(`the service address "${raw}" is not a URL (expected e.g. https://data.example.com)`);
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') throw new UsageError(`the service address must be https:// (got ${url.protocol})`);
  if (url.protocol === 'http:' && !LOOPBACK.test(url.hostname)) {
    throw new UsageError(`refusing to send the API key over plain http to ${url.hostname}; use https:// (plain http is allowed only to this machine)`);
  }
  if (url.username !== '' || url.password !== '') throw new UsageError('the service address must not carry credentials; use ENRICH_API_KEY');
  return url.toString();
}

export async function readApiKey(flags: Pick<RunFlags, 'apiKeyFile'>, env: NodeJS.ProcessEnv): Promise<string> {
  let key: string | undefined;
  let source: string;
  if (flags.apiKeyFile !== undefined) {
    source = flags.apiKeyFile;
    try {
      key = (await readFile(flags.apiKeyFile, 'utf8')).split(/\r?\n/)[0]?.trim();
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      throw new UsageError(`cannot read the API key file ${flags.apiKeyFile}: ${code === 'ENOENT' ? 'no such file' : (code ?? String(error))}`);
    }
  } else {
    source = 'ENRICH_API_KEY';
    key = env['ENRICH_API_KEY']?.trim();
  }
  if (key === undefined || key === '') {
    throw new UsageError(
      flags.apiKeyFile === undefined
        ? 'no API key: set ENRICH_API_KEY or pass --api-key-file <path> (or try --sandbox)'
        : `the API key file ${source} is empty`,
    );
  }
  if (/\s/.test(key)) throw new UsageError(`the API key from ${source} contains whitespace; check it was copied whole`);
  return key;
}

export function formatFor(output: string, requested: OutputFormat | undefined): OutputFormat {
  if (requested !== undefined) return requested;
  return /\.(jsonl|ndjson)$/i.test(output) ? 'jsonl' : 'csv';
}

/** Flags and environment -> the batch's options. Every refusal is a one-line UsageError (exit 2). */
export async function resolveRunOptions(flags: RunFlags, env: NodeJS.ProcessEnv): Promise<RunOptions> {
  if (flags.sandbox && flags.baseUrl !== undefined) throw new UsageError('--sandbox and --base-url exclude each other');
  let service: ServiceTarget;
  if (flags.sandbox) {
    service = { kind: 'sandbox', options: { ...EMBEDDED_SANDBOX } };
  } else {
    const raw = flags.baseUrl ?? env['ENRICH_BASE_URL'];
    if (raw === undefined || raw.trim() === '') {
      throw new UsageError('no service address: set ENRICH_BASE_URL or pass --base-url <url> (or --sandbox to try the embedded sandbox)');
    }
    service = { kind: 'remote', baseUrl: checkBaseUrl(raw.trim()), apiKey: await readApiKey(flags, env) };
  }
  if (flags.output !== '-' && flags.input !== '-' && resolve(flags.output) === resolve(flags.input)) {
    throw new UsageError('refusing to write the results over the input; pick another -o');
  }
  if (flags.output !== '-' && (await stat(flags.output).catch(() => null))?.isDirectory() === true) {
    throw new UsageError(`${flags.output} is a directory; -o takes a file path, or - for stdout`);
  }
  if (flags.summaryJson === '-' && flags.output === '-' && !flags.dryRun) {
    throw new UsageError('--summary-json - needs -o <file> (or --dry-run): stdout already carries the results');
  }
  return {
    input: flags.input,
    output: flags.output,
    format: formatFor(flags.output, flags.format),
    column: flags.column,
    dryRun: flags.dryRun,
    maxCredits: flags.maxCredits ?? null,
    journal: flags.journal,
    fresh: flags.fresh,
    concurrency: flags.concurrency,
    service,
  };
}
