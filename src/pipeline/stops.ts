import { setMaxListeners } from 'node:events';
import { InsufficientCreditsError, InsufficientScopeError, InvalidTokenError } from '../api/errors.js';
import { StoppedError, type Lane } from './flow.js';

/** Why a run ended early. Each maps to an exit code and a "what now" message. */
export type Stop =
  /** `free`: even the free match was refused for credits: the account itself is blocked. */
  | { reason: 'credits'; balance: number | null; required: number | null; free: boolean }
  /** `declined`: a person at a terminal answered no before the spend (cli asks; limit is 0). */
  | { reason: 'budget'; limit: number; declined?: boolean }
  /** A monthly budget (store/budget.ts) had no room for the next purchase: the store's (person null) or a person's. */
  | { reason: 'monthly'; person: string | null; cap: number }
  | { reason: 'auth'; code: string; message: string }
  /** The service cannot be reached, is not the service API, or asks to wait too long. */
  | { reason: 'unavailable'; message: string; worked: boolean }
  | { reason: 'interrupted' };

/** A controller whose signal every queued request listens to: thousands, by design. */
export function sharedController(): AbortController {
  const controller = new AbortController();
  setMaxListeners(0, controller.signal);
  return controller;
}

/** When several reasons stop a run, the exit code reports the one that needs acting on first. */
const PRECEDENCE: Record<Stop['reason'], number> = { interrupted: 5, auth: 4, unavailable: 3, credits: 2, budget: 1, monthly: 1 };

/** The run's two brakes: `paid` stops new paid calls (a 402, --max-credits), `all` every call (a refused key, Ctrl-C); the highest-precedence first stop is reported. */
export class Stops {
  first: Stop | null = null;
  readonly paid = sharedController();
  readonly all = sharedController();

  stopPaid(stop: Stop): void {
    if (this.first === null || PRECEDENCE[stop.reason] > PRECEDENCE[this.first.reason]) this.first = stop;
    this.paid.abort(new StoppedError(stop.reason));
  }

  /** Records a reason the run ends early without stopping a call (a monthly budget: purchases already reserved still finish). */
  note(stop: Stop): void {
    if (this.first === null || PRECEDENCE[stop.reason] > PRECEDENCE[this.first.reason]) this.first = stop;
  }

  stopAll(stop: Stop): void {
    this.stopPaid(stop);
    this.all.abort(new StoppedError(stop.reason));
  }

  /** Stops the run for answers about the account rather than the company; true if it did. */
  stopFor(error: unknown, lane: Lane): boolean {
    if (error instanceof InvalidTokenError || error instanceof InsufficientScopeError) {
      this.stopAll({ reason: 'auth', code: error.code, message: error.message });
      return true;
    }
    if (error instanceof InsufficientCreditsError) {
      const stop: Stop = { reason: 'credits', balance: error.balance ?? null, required: error.required ?? null, free: lane === 'match' };
      // A free call refused for credits means the account can do nothing at all.
      if (lane === 'match') this.stopAll(stop);
      else this.stopPaid(stop);
      return true;
    }
    return false;
  }
}
