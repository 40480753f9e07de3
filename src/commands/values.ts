import { InvalidArgumentError } from 'commander';
import { inheritedDescriptor } from '../io/paths.js';
import { parseLatency, type LatencySpec } from '../sandbox/latency.js';

/** Option values: commander calls each with the text given, and a refusal says what was expected. */

/** `-o /dev/stdout` (or /dev/fd/1, /proc/self/fd/1) is stdout, with all that `-` means for it. */
export const stdoutAlias = (path: string): string => (inheritedDescriptor(path) === 1 ? '-' : path);

export const integer = (min: number, max: number, what: string) => (value: string): number => {
  const n = Number(value);
  if (!/^\d+$/.test(value.trim()) || !Number.isSafeInteger(n) || n < min || n > max) {
    // MAX_SAFE_INTEGER stands for "no upper limit": say that, not its sixteen digits.
    const range = max === Number.MAX_SAFE_INTEGER ? `, ${min} or more` : ` from ${min} to ${max}`;
    throw new InvalidArgumentError(`${what} must be a whole number${range}`);
  }
  return n;
};

export const fraction = (value: string): number => {
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || n < 0 || n > 1) throw new InvalidArgumentError('must be a number from 0 to 1');
  return n;
};

export const latencySpec = (value: string): LatencySpec => {
  const spec = parseLatency(value);
  if (spec === undefined) throw new InvalidArgumentError('takes ms (200), a uniform range (100-300) or lognormal:<median>[:<sigma>[:<max>]] (ms, up to 60000)');
  return spec;
};

const UNITS: Record<string, number> = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 };

/** "30d", "12h", "90m", "2w", "45s", or a bare 0: a duration in ms. */
export function parseDuration(value: string, what: string): number {
  const m = /^\s*(\d+)\s*([smhdw])?\s*$/i.exec(value);
  const unit = m?.[2]?.toLowerCase();
  if (m === null || (unit === undefined && m[1] !== '0')) {
    throw new InvalidArgumentError(`${what} takes a duration such as 30d, 12h or 90m (s, m, h, d, w)`);
  }
  return Number(m[1]) * (unit === undefined ? 0 : (UNITS[unit] as number));
}

export const duration = (what: string) => (value: string): number => parseDuration(value, what);
