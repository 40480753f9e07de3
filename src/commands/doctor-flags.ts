import type { Command } from 'commander';
import { integer } from './values.js';

/** `enrich doctor`'s flags; cli/options.ts resolves them without refusing (a refusal is a report line). */
export interface DoctorFlags {
  baseUrl: string | undefined;
  sandbox: boolean;
  apiKeyFile: string | undefined;
  store: string | undefined;
  probeRate: number | null;
  json: boolean;
}

const DOCTOR_EXAMPLES = `
Examples:
  Before putting a batch in cron, with the environment cron will have:
    $ ENRICH_BASE_URL=https://data.example.com ENRICH_API_KEY=... enrich doctor

  Also look for the rate ceiling (free matches only, at most 50):
    $ enrich doctor --probe-rate 50

  Try it without a service:
    $ enrich doctor --sandbox

Exit codes: 0 all ok · 2 usage (no address or key, a bad --store) ·
  5 key refused (401/403) · 6 the service cannot be reached · 1 anything else
`;

/** `enrich doctor [options]`: would a batch work here. */
export function defineDoctor(program: Command, done: (flags: DoctorFlags) => void): Command {
  return program
    .command('doctor')
    .description('check that a batch would work here: the service, the key, the endpoints, latency, the store')
    .option('--base-url <url>', 'service address (env: ENRICH_BASE_URL)')
    .option('--sandbox', 'check against an embedded sandbox started in-process', false)
    .option('--api-key-file <path>', 'read the API key from a file instead of ENRICH_API_KEY')
    .option('--store <path>', 'the purchase store (env: ENRICH_STORE; default: in $XDG_STATE_HOME/enrich)')
    .option('--probe-rate [requests]', 'also look for the rate ceiling with up to this many free matches (default 100)', integer(1, 1_000, '--probe-rate'))
    .option('--json', 'the report as JSON', false)
    .addHelpText('after', DOCTOR_EXAMPLES)
    .action((opts: Record<string, unknown>) => {
      const probe = opts['probeRate'] as number | true | undefined;
      done({ ...(opts as Omit<DoctorFlags, 'probeRate'>), probeRate: probe === undefined ? null : probe === true ? 100 : probe });
    });
}
