/**
 * Exit codes are a public contract (README "Exit codes"); scripts branch on them.
 * Only src/cli/main.ts turns an outcome or an error into one of these.
 */
export const ExitCode = {
  OK: 0,
  FAILURE: 1,
  USAGE: 2,
  PARTIAL: 3,
  CREDITS: 4,
  AUTH: 5,
  /** The service cannot be reached at all (DNS, refused, TLS, timeout): nothing was sent. */
  UNAVAILABLE: 6,
  INTERRUPTED: 130,
} as const;
export type ExitCode = (typeof ExitCode)[keyof typeof ExitCode];

/** An error whose message is fit to show the user as one line, with the exit code it maps to. */
export class EnrichError extends Error {
  override readonly name: string = 'EnrichError';
  constructor(
    message: string,
    readonly exitCode: ExitCode,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** Bad flags, a missing key, an unusable input file: the user can fix it and rerun. */
export class UsageError extends EnrichError {
  override readonly name = 'UsageError';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, ExitCode.USAGE, options);
  }
}

/** The input cannot be read as the CSV we need (malformed, no domain column). */
export class InputError extends EnrichError {
  override readonly name = 'InputError';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, ExitCode.USAGE, options);
  }
}

export function errorMessage(error: unknown): string {
  if (error instanceof Error) return error.message;
  return String(error);
}

/** Ctrl-C or SIGTERM outside the request phase (scan, output): nothing half-done is kept. */
export class InterruptedError extends EnrichError {
  override readonly name = 'InterruptedError';
  constructor(message = 'interrupted') {
    super(message, ExitCode.INTERRUPTED);
  }
}
