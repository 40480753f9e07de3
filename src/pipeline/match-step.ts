import { ApiError, ValidationError } from '../api/errors.js';
import type { ServiceClient } from '../api/client.js';
import type { StoreEvent } from '../store/types.js';
import type { Attempter } from './attempt.js';
import type { ProgressSink } from './progress.js';
import type { Company, RunState } from './state.js';
import type { Stops } from './stops.js';

export interface MatchStepDeps {
  state: RunState;
  client: ServiceClient;
  attempt: Attempter;
  stops: Stops;
  progress: ProgressSink;
  record(event: StoreEvent): void;
  /** A company first met in this run: load what the store holds of it, and plan. */
  planCompany(company: Company): void;
  /** A matched company that may need buying. */
  enqueueEnrich(company: Company): void;
  /** A match starts (true) or ends (false) waiting out a retry's backoff. */
  resting?(on: boolean): void;
}

/** The free match of one input domain; a hit hands its company on to the enrich step. */
export function matchStep(deps: MatchStepDeps): (d: number) => Promise<void> {
  const { state, client, stops, progress, record } = deps;
  const hooks = deps.resting === undefined ? {} : { resting: deps.resting };
  return async (d) => {
    const domain = state.domains[d] as string;
    const result = await deps.attempt('match', stops.all.signal, (signal) => client.match(domain, { signal }), hooks);
    if (result.kind === 'stopped') return;
    // A domain whose match was refused for the account stays owed, and shows as skipped.
    if (result.kind === 'error' && stops.stopFor(result.error, 'match')) return;
    progress({ type: 'matched' });
    if (result.kind === 'error') {
      const code = result.error instanceof ApiError ? result.error.code : 'error';
      record({ type: 'match', domain: domain, status: 'error', code, final: result.error instanceof ValidationError });
      return;
    }
    const company = result.value.company;
    if (!result.value.matched || company === null) {
      record({ type: 'match', domain: domain, status: 'miss' });
      return;
    }
    const canonical = company.domain.trim().toLowerCase().replace(/\.$/, '');
    const isNew = !state.hasCompany(canonical);
    record({ type: 'match', domain: domain, status: 'hit', company: canonical, name: company.name });
    const target = state.company(canonical);
    if (target === undefined) return;
    if (isNew) deps.planCompany(target);
    deps.enqueueEnrich(target);
  };
}
