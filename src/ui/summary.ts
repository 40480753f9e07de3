import type { Stop } from '../pipeline/execute.js';
import type { Summary } from '../pipeline/summary.js';
import { num } from './format.js';

const usd = (n: number): string => `$${n.toFixed(2)}`;

/** The totals as a small aligned table for stderr. */
export function formatSummary(s: Summary): string {
  const rows: [string, string][] = [
    ['rows', `${num(s.rows)}${s.invalid_rows > 0 ? `   ${num(s.invalid_rows)} invalid` : ''}`],
    ['unique domains', num(s.unique_domains)],
    ['companies found', num(s.companies)],
    [s.dry_run ? 'rows matched' : 'matched', num(s.matched)],
    ['no match', num(s.no_match)],
  ];
  if (s.errors > 0 || !s.dry_run) rows.push(['errors', num(s.errors)]);
  if (s.skipped > 0 || !s.dry_run) rows.push(['skipped', num(s.skipped)]);
  if (s.dry_run) {
    const c = s.estimated_cost_usd;
    rows.push(['estimated cost', `${num(s.estimated_credits)} credits   ${usd(c.starter)} Starter · ${usd(c.growth)} Growth · ${usd(c.scale)} Scale`]);
  } else {
    const extra: string[] = [];
    if (s.credits_charged_total !== s.credits_charged) extra.push(`${num(s.credits_charged_total)} over all runs of this journal`);
    if (s.credits_remaining !== null) extra.push(`${num(s.credits_remaining)} left`);
    rows.push(['credits spent', `${num(s.credits_charged)}${extra.length > 0 ? `   (${extra.join('; ')})` : ''}`]);
  }
  const width = Math.max(...rows.map(([label]) => label.length));
  const valueWidth = Math.max(...rows.map(([, v]) => v.split(' ')[0]?.length ?? 0));
  const title = s.dry_run ? 'dry run: nothing was spent' : s.status === 'done' ? 'done' : s.status;
  const lines = rows.map(([label, value]) => {
    const [head = '', ...rest] = value.split(' ');
    return `  ${label.padEnd(width)}  ${head.padStart(valueWidth)}${rest.length > 0 ? ` ${rest.join(' ')}` : ''}`;
  });
  return [`enrich: ${title}`, ...lines].join('\n') + '\n';
}

/**
 * The two codes the spec names get their own advice; any other (a new code under 401 or 403,
 * such as key_suspended) shows the service's own words and code, never a code it did not send.
 */
function authStep(code: string, message: string): string {
  if (code === 'insufficient_scope') return 'the API key lacks the search:read scope (insufficient_scope); use a key that has it, then run the same command';
  if (code === 'invalid_token') return 'the service refused the API key (invalid_token); check ENRICH_API_KEY or --api-key-file, then run the same command';
  return `the service refused the API key: ${message}; sort it out with the service, then run the same command`;
}

/** What happened and what to do next, in one line. Null when there is nothing to add. */
export function nextStep(s: Summary, stop: Stop | null): string | null {
  switch (stop?.reason) {
    case 'interrupted':
      return `interrupted: the journal is saved in ${s.journal}; run the same command to resume (nothing paid for is lost)`;
    case 'credits': {
      const balance = stop.balance === null ? '' : `balance ${num(stop.balance)}, `;
      // Refused before anything billable was known to be owed (a 402 on the free match, say):
      // "needs 0 more credits" would contradict the stop itself.
      if (s.estimated_credits === 0) return `stopped: the service refused for credits (${balance.replace(/, $/, '') || 'no balance given'}) before anything left was priced; top up, or ask the service, then run the same command to resume`;
      return `stopped: ${balance}needs ${num(s.estimated_credits)} more credits; top up and run the same command to resume`;
    }
    case 'budget':
      return `stopped at --max-credits ${num(stop.limit)}: ${num(s.estimated_credits)} more credits would finish the job; run the same command with a higher --max-credits to resume`;
    case 'auth':
      return authStep(stop.code, stop.message);
    case undefined:
      break;
  }
  if (s.dry_run) return s.estimated_credits > 0 ? `a real run would spend exactly ${num(s.estimated_credits)} credits; drop --dry-run to go ahead` : null;
  if (s.errors > 0) return `${num(s.errors)} rows failed (see enrich_error); run the same command to retry them`;
  return null;
}
