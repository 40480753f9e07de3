import { ApiError, ConnectionError, NotServiceApiError, UnusablePaidAnswerError } from '../api/errors.js';

/** Why the service is taken to be down: one line, naming the host and the cause. */
export interface Outage {
  message: string;
  /** Whether anything had succeeded before: then results so far are written. */
  worked: boolean;
}

/** Consecutive failed attempts, with no answer from the service between, that open the breaker. */
export const BREAKER_FAILURES = 25;
/** Before anything has worked, this many unanswered attempts are enough: a down service must stop in seconds. */
export const COLD_FAILURES = 5;

/**
 * The circuit breaker: it watches every attempt's outcome and says when the service is down, so
 * a run neither grinds through a million rows of retries nor exits with "158 rows failed" when
 * the truth is "the host cannot be reached". A 2xx or a 4xx from the service proves it up;
 * connection failures, timeouts and 5xx answers count against it.
 */
export class Health {
  private worked = false;
  private failures = 0;
  /** Attempts that got no answer at all while nothing had yet worked. */
  private silent = 0;

  /** An attempt that was answered by the service: it is there. */
  answered(): void {
    this.worked = true;
    this.failures = 0;
  }

  /**
   * An attempt that failed; returns the outage if this one opens the breaker. `replayable`: the
   * attempt went under a key sent before whose fate is open, so a problem document may be that
   * key's stored outcome replayed (a Stripe-style service keeps a 500 under its key): the service
   * answered, and is up, whatever the status.
   */
  failed(error: unknown, replayable = false): Outage | null {
    // A 2xx that could not be used (another company's record) was still the service answering.
    if ((replayable && error instanceof ApiError && error.definitive) || error instanceof UnusablePaidAnswerError) {
      this.answered();
      return null;
    }
    if (error instanceof NotServiceApiError && !this.worked) {
      return { message: `${error.message} (ENRICH_BASE_URL or --base-url) and rerun`, worked: this.worked };
    }
    if (error instanceof ApiError && error.status >= 400 && error.status < 500 && !(error instanceof NotServiceApiError)) {
      // The service judged the request (a 422, a 429): it is there. A 5xx is not counted as an
      // answer: a service that answers 500 to everything is down for the purpose of a batch.
      this.answered();
      return null;
    }
    this.failures++;
    const connection = error instanceof ConnectionError ? error : null;
    if (connection !== null && !this.worked) {
      this.silent++;
      // Nothing has ever answered and the host cannot even be reached: no retry will change that.
      if (connection.neverSent || this.silent >= COLD_FAILURES) return this.outage(connection);
    }
    if (this.failures >= BREAKER_FAILURES) return this.outage(connection, error);
    return null;
  }

  private outage(connection: ConnectionError | null, error?: unknown): Outage {
    const why = connection?.message ?? (error instanceof Error ? error.message : String(error));
    const what = this.worked ? `the service stopped answering (${this.failures} attempts in a row failed; last: ${why})` : why;
    return { message: `${what}; nothing more was sent, rerun the same command later`, worked: this.worked };
  }
}
