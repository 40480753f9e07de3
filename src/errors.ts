/** Exit codes are a public contract (README "Exit codes") scripts branch on; only cli/main.ts turns an outcome into one. */
export const ExitCode = {
  OK: 0,
  FAILURE: 1,
  USAGE: 2,
  PARTIAL: 3,
  CREDITS: 4,
  AUTH: 5,
  /** The service cannot be reached, or asks to wait too long: nothing is wrong with the input; rerun later. */
  UNAVAILABLE: 6,
  INTERRUPTED: 130,
  /** stdout's reader went away (`| head`): stop quietly, as rg and qsv do, with SIGPIPE's shell status (128 + 13) so `set -o pipefail` can tell. */
  CLOSED_PIPE: 141,
} as const;
export type ExitCode = (typeof ExitCode)[keyof typeof ExitCode];

/** What kind of trouble an error, a stopped run or a failed check is; cli/main.ts maps each kind to its exit code. */
export type ErrorKind = 'failure' | 'usage' | 'partial' | 'credits' | 'auth' | 'unavailable' | 'interrupted' | 'closed_pipe';

/** An error whose message is fit to show the user as one line, with the kind of trouble it is. */
export class EnrichError extends Error {
  override readonly name: string = 'EnrichError';
  constructor(
    message: string,
    readonly kind: ErrorKind,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** Bad flags, a missing key, an unusable input file: the user can fix it and rerun. */
export class UsageError extends EnrichError {
  override readonly name = 'UsageError';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, 'usage', options);
  }
}

/** The input cannot be read as the CSV we need (malformed, no domain column). */
export class InputError extends EnrichError {
  override readonly name = 'InputError';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, 'usage', options);
  }
}

/** An error and the errors it was caused by, outermost first (at most 8: a cycle ends there). */
export function* causeChain(error: unknown): Generator<unknown> {
  for (let e = error, depth = 0; e !== undefined && e !== null && depth < 8; e = (e as { cause?: unknown }).cause, depth++) yield e;
}

export function errorMessage(error: unknown): string {
  if (error instanceof Error) return error.message;
  return String(error);
}

/** Ctrl-C or SIGTERM outside the request phase (scan, output): nothing half-done is kept. */
export class InterruptedError extends EnrichError {
  override readonly name = 'InterruptedError';
  constructor(message = 'interrupted') {
    super(message, 'interrupted');
  }
}

const YEAR_S = 365 * 86_400;

/** A wait as a person reads it ("45 s", "5 min 1 s", "3 days", "over a year"), rounded up so a wait just past a threshold never reads as the threshold. */
export function formatWait(seconds: number): string {
  if (!(seconds <= YEAR_S)) return 'over a year';
  const s = Math.max(0, Math.ceil(seconds));
  if (s >= 86_400 * 2) return `${Math.ceil(s / 8_640) / 10} days`;
  if (s >= 3600) return `${Math.ceil(s / 360) / 10} h`;
  if (s >= 60) return s % 60 === 0 ? `${s / 60} min` : `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${s} s`;
}
