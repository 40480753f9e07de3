import { UsageError } from '../errors.js';
import { startSandbox, type IdempotencyMode, type KeyConfig, type ReplayRequestId } from '../sandbox/index.js';
import { describeLatency, type LatencySpec } from '../sandbox/latency.js';
import { num } from '../ui/format.js';

export interface SandboxCommandOptions {
  /** The key came from $ENRICH_API_KEY, which may be a real one: never print it. */
  keyFromEnv?: boolean;
  host: string;
  port: number;
  keys: string[];
  balance: number;
  rateLimit: number | null;
  burst: number | undefined;
  failRate: number;
  dropRate: number;
  latency: LatencySpec;
  /** The bucket's clock tick, ms (0: exact). */
  clockTickMs: number;
  /** Count per fixed window of this many ms instead of a bucket. */
  fixedWindowMs: number | undefined;
  seed: number;
  idempotency: IdempotencyMode;
  replayRequestId: ReplayRequestId;
}

/** `enrich sandbox`: serve the local service until SIGINT/SIGTERM, then close cleanly. */
export async function serveSandbox(options: SandboxCommandOptions, out: NodeJS.WritableStream, stop: AbortSignal): Promise<void> {
  const keys: KeyConfig[] = options.keys.map((key) => ({ key }));
  let sandbox;
  try {
    sandbox = await startSandbox({
      host: options.host,
      port: options.port,
      keys,
      balance: options.balance,
      rateLimit: options.rateLimit,
      ...(options.burst === undefined ? {} : { burst: options.burst }),
      failRate: options.failRate,
      dropRate: options.dropRate,
      latency: options.latency,
      clockTickMs: options.clockTickMs,
      ...(options.fixedWindowMs === undefined ? {} : { fixedWindowMs: options.fixedWindowMs }),
      seed: options.seed,
      idempotency: options.idempotency,
      replayRequestId: options.replayRequestId,
    });
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
