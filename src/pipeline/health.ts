import { ApiError, ConnectionError, IN_PROGRESS, NotServiceApiError, RateLimitedError, UnusablePaidAnswerError } from '../api/errors.js';
import { formatWait } from '../errors.js';

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
 * The circuit breaker: says when the service is down, so a run neither grinds through retries nor reports "158 rows failed" for a
 * host it cannot reach. A 2xx or 4xx proves the service up; connection failures, timeouts and 5xx count against it.
 */
export class Health {
  private worked = false;
  private failures = 0;
  /** Attempts that got no answer at all while nothing had yet worked. */
  private silent = 0;
  /** When the paid endpoint last answered afresh (a 2xx, or an error under a key never lost), not a replay. The free match does not count: an outage may take the paid endpoint down alone. */
  private goodAt = Number.NEGATIVE_INFINITY;

  /** 429s since the service last took a request, and when the first of them came (monotonic ms). */
  private refused = 0;
  private refusedFrom = 0;

  /** `now`: the clock lost answers are stamped with. `refusals`: nothing but 429 to `count` attempts over `ms` is an outage too, whatever Retry-After says. */
  constructor(
    private readonly now: () => number = Date.now,
    private readonly refusals: { count: number; ms: number; clock: () => number } | null = null,
  ) {}

  /** An attempt the service answered: it is there. `fresh`: the paid endpoint's own answer to this request (see goodAt). */
  answered(fresh: boolean): void {
    this.worked = true;
    this.failures = 0;
    this.refused = 0;
    if (fresh) this.goodAt = this.now();
  }

  /** Whether the paid endpoint answered afresh since `at`: then an error under a key lost before it comes from behind its idempotency layer (a replay), not an outage. */
  answeredSince(at: number): boolean {
    return this.goodAt > at;
  }

  /**
   * A failed attempt; returns the outage if it opens the breaker. Under a `lostKey` a problem document may be a stored outcome replayed,
   * never fresh evidence: a 4xx, or a 500 after a fresh answer since the loss, shows the service up; an earlier 500 counts against it.
   */
  failed(error: unknown, paid: boolean, lostKey?: { lostAt: number | null }): Outage | null {
    // A 2xx that could not be used (another company's record) was still the service answering.
    if (error instanceof UnusablePaidAnswerError) {
      this.answered(true);
      return null;
    }
    // A 429 comes from the rate limiter in front: it proves nothing of what is behind, so it neither counts nor clears a failure,
    // and is never fresh evidence; the limiter handles it, unless nothing else comes back for long.
    if (error instanceof RateLimitedError) return this.refusedAll();
    // Anything else breaks a run of 429s: "every request answered 429" must be true when said.
    this.refused = 0;
    // A 409 ("a request under this key is still running") says as little of the service's health.
    if (error instanceof ApiError && error.status === IN_PROGRESS) return null;
    if (lostKey !== undefined && error instanceof ApiError && error.definitive) {
      const since = lostKey.lostAt !== null && this.answeredSince(lostKey.lostAt);
      if (error.status < 500 || since) {
        this.answered(false);
        return null;
      }
    }
    if (error instanceof NotServiceApiError && !this.worked) {
      return { message: `${error.message} (ENRICH_BASE_URL or --base-url) and rerun`, worked: this.worked };
    }
    if (error instanceof ApiError && error.status >= 400 && error.status < 500 && !(error instanceof NotServiceApiError)) {
      // The service judged the request (a 422, a 429): it is there. A 5xx is not counted as an
      // answer: a service that answers 500 to everything is down for the purpose of a batch.
      this.answered(paid && lostKey === undefined);
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

  private refusedAll(): Outage | null {
    if (this.refusals === null) return null;
    const now = this.refusals.clock();
    if (this.refused++ === 0) this.refusedFrom = now;
    if (this.refused < this.refusals.count || now - this.refusedFrom < this.refusals.ms) return null;
    const over = formatWait(Math.round((now - this.refusedFrom) / 1000));
    return { message: `the service answered every request with 429 (rate limited) for ${over}, ${this.refused} in a row; nothing more was sent, rerun the same command later`, worked: this.worked };
  }

  private outage(connection: ConnectionError | null, error?: unknown): Outage {
    const why = connection?.message ?? (error instanceof Error ? error.message : String(error));
    const what = this.worked ? `the service stopped answering (${this.failures} attempts in a row failed; last: ${why})` : why;
    return { message: `${what}; nothing more was sent, rerun the same command later`, worked: this.worked };
  }
}
