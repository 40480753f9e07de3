import { UsageError } from '../errors.js';
import { startSandbox, type KeyConfig, type SandboxOptions } from '../sandbox/index.js';
import { describeLatency } from '../sandbox/latency.js';
import { num } from '../ui/format.js';

/** `enrich sandbox`'s options: the service's, each given, and the keys as text. */
export type SandboxCommandOptions = Required<Pick<SandboxOptions, 'host' | 'port' | 'balance' | 'rateLimit' | 'failRate' | 'dropRate' | 'latency' | 'clockTickMs' | 'seed' | 'idempotency' | 'replayRequestId'>> &
  Pick<SandboxOptions, 'burst' | 'fixedWindowMs'> & {
    keys: string[];
    /** The key came from $ENRICH_API_KEY, which may be a real one: never print it. */
    keyFromEnv?: boolean;
  };

/** `enrich sandbox`: serve the local service until SIGINT/SIGTERM, then close cleanly. */
export async function serveSandbox(options: SandboxCommandOptions, out: NodeJS.WritableStream, stop: AbortSignal): Promise<void> {
  const keys: KeyConfig[] = options.keys.map((key) => ({ key }));
  let sandbox;
  try {
    const { keyFromEnv: _, ...service } = options;
    sandbox = await startSandbox({ ...service, keys });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'EADDRINUSE') throw new UsageError(`port ${options.port} on ${options.host} is already in use; pass another --port (0 picks a free one)`);
    if (code === 'EACCES') throw new UsageError(`not allowed to listen on ${options.host}:${options.port}; pick a port above 1024`);
    throw error;
  }
  const limits = [
    options.rateLimit === null ? 'no rate limit' : `rate limit ${num(options.rateLimit)} req/s per key${limitKind(options)}`,
    `fail rate ${options.failRate}`,
    `drop rate ${options.dropRate}`,
    describeLatency(options.latency),
    `seed ${options.seed}`,
    options.idempotency === 'spec' ? 'idempotency: 200s stored' : `idempotency: every outcome stored, replays carry ${options.replayRequestId === 'none' ? 'no' : `the ${options.replayRequestId}`} request id`,
  ];
  out.write(
    [
      `enrich sandbox listening on ${sandbox.url}`,
      `  ${num(sandbox.directory.size)} companies · ${limits.join(' · ')}`,
      ...(options.keyFromEnv === true
        ? [`  key: the value of $ENRICH_API_KEY, not shown (scope search:read, ${num(options.balance)} credits)`]
        : sandbox.keys.map((k) => `  key ${k} (scope search:read, ${num(options.balance)} credits)`)),
      '',
      '  Try it:',
      `    export ENRICH_BASE_URL=${sandbox.url}`,
      ...(options.keyFromEnv === true ? [] : [`    export ENRICH_API_KEY=${sandbox.keys[0] ?? ''}`]),
      '    enrich fixtures/companies.csv -o enriched.csv',
      '',
      `  Ledger: curl -H "Authorization: Bearer $ENRICH_API_KEY" ${sandbox.url}/_sandbox/ledger`,
      'Ctrl-C to stop.',
      '',
    ].join('\n'),
  );
  await new Promise<void>((resolve) => {
    if (stop.aborted) resolve();
    else stop.addEventListener('abort', () => resolve(), { once: true });
  });
  await sandbox.close();
  out.write('enrich sandbox stopped\n');
}

/** How the limit counts: a bucket (its depth, its clock) or a fixed window. */
function limitKind(options: SandboxCommandOptions): string {
  if (options.fixedWindowMs !== undefined) return ` (counted per fixed ${num(options.fixedWindowMs)} ms window)`;
  const parts = [...(options.burst === undefined ? [] : [`burst ${num(options.burst)}`]), ...(options.clockTickMs > 0 ? [`clock tick ${options.clockTickMs} ms`] : [])];
  return parts.length === 0 ? '' : ` (${parts.join(', ')})`;
}
