import { Option, type Command } from 'commander';
import type { SandboxCommandOptions } from './sandbox.js';
import { fixedLatency } from '../sandbox/latency.js';
import { fraction, integer, latencySpec } from './values.js';

const SANDBOX_EXAMPLES = `
Examples:
  A local service for a demo, then a batch against it (in another terminal):
    $ enrich sandbox --port 4010 --key sk_demo
    $ export ENRICH_BASE_URL=http://127.0.0.1:4010 ENRICH_API_KEY=sk_demo
    $ enrich fixtures/companies.csv -o enriched.csv

  A harsh one, to see rate-limit pauses, retries and a 402 stop:
    $ enrich sandbox --rate-limit 20 --fail-rate 0.05 --drop-rate 0.01 \\
        --latency 50 --balance 100

  What real services do: answers that vary, a one-token bucket on a
  whole-millisecond clock, or a gateway counting per fixed second:
    $ enrich sandbox --rate-limit 500 --latency 100-300
    $ enrich sandbox --rate-limit 100 --burst 1 --clock-tick 1 \\
        --latency lognormal:20:0.8
    $ enrich sandbox --rate-limit 100 --fixed-window 1000
`;

/** The flags as commander gives them: the service's options under the flags' names. */
type Flags = Omit<SandboxCommandOptions, 'keys' | 'keyFromEnv' | 'rateLimit' | 'clockTickMs' | 'fixedWindowMs'> & { key?: string[]; rateLimit: number; clockTick: number; fixedWindow?: number };

/** `enrich sandbox [options]`: serve the local implementation of the service. */
export function defineSandbox(program: Command, env: NodeJS.ProcessEnv, done: (options: SandboxCommandOptions) => void): Command {
  return program
    .command('sandbox')
    .description('serve the local implementation of the service (for demos and tests)')
    .option('--port <n>', 'port to listen on (0 picks a free one)', integer(0, 65535, '--port'), 4010)
    .option('--host <host>', 'address to listen on', '127.0.0.1')
    .option('--key <key...>', 'API keys to accept, each with scope search:read (default: $ENRICH_API_KEY, else generated)')
    .option('--balance <credits>', 'starting credits per key', integer(0, Number.MAX_SAFE_INTEGER, '--balance'), 10_000)
    .option('--rate-limit <req/s>', 'requests a second per key, free calls included (0: none)', integer(0, 1_000_000, '--rate-limit'), 0)
    .option('--burst <n>', 'token bucket size (default: one second of --rate-limit)', integer(1, 1_000_000, '--burst'))
    .option('--fail-rate <0..1>', 'share of company calls answered 500', fraction, 0)
    .option('--drop-rate <0..1>', 'share of answers lost after the call ran (connection reset)', fraction, 0)
    .option('--clock-tick <ms>', "the bucket's clock tick (1: whole milliseconds; default 0: exact)", integer(0, 60_000, '--clock-tick'), 0)
    .option('--fixed-window <ms>', 'count requests per fixed window of this many ms (--rate-limit x window each) instead of a bucket', integer(1, 3_600_000, '--fixed-window'))
    .addOption(
      new Option('--latency <spec>', 'delay before each answer: fixed (ms), uniform (min-max) or long-tailed (lognormal:median[:sigma[:max]])')
        .argParser(latencySpec)
        .default(fixedLatency(0), '0'),
    )
    .option('--seed <n>', 'seed for the injected faults and latency draws', integer(0, 2 ** 31, '--seed'), 1)
    .addOption(
      new Option('--idempotency <mode>', 'what an Idempotency-Key stores: spec (200s only; a 402 or 500 stores nothing) or stripe (every outcome, replayed forever)')
        .choices(['spec', 'stripe'])
        .default('spec'),
    )
    .addOption(
      new Option('--replay-request-id <which>', 'the request id a replay carries: original, fresh (a new one each time) or none')
        .choices(['original', 'fresh', 'none'])
        .default('original'),
    )
    .addHelpText('after', SANDBOX_EXAMPLES)
    .action((opts: Flags) => {
      const { key, rateLimit, clockTick, fixedWindow, ...rest } = opts;
      const fromEnv = env['ENRICH_API_KEY'];
      const keyFromEnv = key === undefined && fromEnv !== undefined && fromEnv !== '';
      const keys = key ?? (keyFromEnv ? [fromEnv] : []);
      done({ ...rest, keyFromEnv, keys, rateLimit: rateLimit === 0 ? null : rateLimit, clockTickMs: clockTick, ...(fixedWindow === undefined ? {} : { fixedWindowMs: fixedWindow }) });
    });
}
