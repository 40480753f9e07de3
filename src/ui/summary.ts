import type { Stop } from '../pipeline/stops.js';
import type { MonthJson, Summary } from '../pipeline/summary.js';
import { count, elapsed, num, wrapWords } from './format.js';
import { describeCheapest, dollars, moneyRows, unconfirmedMonth } from './pricing.js';
import { capName } from '../store/budget.js';

/** The totals as a small aligned table for stderr, in the vocabulary of the summary JSON. */
export function formatSummary(s: Summary): string {
  const rows: [string, string][] = [
    ['rows', `${num(s.rows)}${s.invalid_rows > 0 ? `   ${num(s.invalid_rows)} invalid` : ''}`],
    ['unique domains', num(s.unique_domains)],
    ['companies', num(s.companies)],
    ['rows matched', num(s.matched)],
    ...(s.dry_run || s.found > 0 ? ([['rows found', `${num(s.found)}   (would be bought)`]] as [string, string][]) : []),
    ['rows no match', num(s.no_match)],
  ];
  if (s.errors > 0 || !s.dry_run) rows.push(['rows errored', num(s.errors)]);
  if (s.skipped > 0 || !s.dry_run) rows.push(['rows skipped', num(s.skipped)]);
  if (s.dry_run) {
    if (s.reused > 0) rows.push(['reused', `${num(s.reused)}   ${s.reused === 1 ? 'company' : 'companies'} held in the store, free${saved(s)}`]);
    const stale = s.stale > 0 ? `   (${num(s.stale)} to refresh stale records)` : '';
    rows.push(['to buy', `${count(s.estimated_credits, 'company', 'companies')}${stale}`]);
    if (s.left_by_cap > 0) rows.push(['left by cap', `${count(s.left_by_cap, 'company', 'companies')}   past ${s.budget?.limits_estimate === true ? "the monthly budget's room" : '--max-credits'}, for a later run`]);
    rows.push(...moneyRows(s));
  } else {
    rows.push(['bought', `${num(s.bought)}${s.bought > 0 ? `   ${s.bought === 1 ? 'company' : 'companies'}, by this run` : ''}`]);
    rows.push(['reused', `${num(s.reused)}${s.reused > 0 ? `   ${s.reused === 1 ? 'company' : 'companies'} from the store${saved(s)}` : ''}`]);
    rows.push(['credits spent', `${num(s.credits_charged)}${s.credits_remaining !== null ? `   (${num(s.credits_remaining)} left)` : ''}`]);
    // Beside what was spent, what may yet be: so the figures on the screen add up on their face.
    if (s.at_risk > 0) rows.push(['at risk', `${num(s.at_risk)}   ${s.at_risk === 1 ? 'company waits' : 'companies wait'} on a paid call whose answer never came: at most ${count(s.at_risk, 'credit')} more`]);
    const m = s.month;
    if (m !== null && m.run_credits > 0) rows.push(['this month', `${num(m.credits)}   credits charged to this service's runs since ${m.since.slice(0, 10)} UTC${unconfirmedMonth(m)}; ${dollars(m.bill_usd)} on ${describeCheapest(m)}${maxBill(m)} (not counted: other tools, rolled-over credits)`]);
    if (s.credits_unconfirmed > 0) {
      rows.push(['maybe charged', `${num(s.credits_unconfirmed)}   more: ${s.credits_unconfirmed === 1 ? 'an answer' : 'answers'} lost, then only errors under ${s.credits_unconfirmed === 1 ? 'its key' : 'their keys'} (enrich ledger show counts them)`]);
    }
  }
  rows.push(...budgetRows(s));
  // Figures are right-aligned in a column; the trailing text rows are not figures.
  const text: [string, string][] = [];
  if (s.output !== null) text.push(['output', s.output === '-' ? 'stdout' : s.output]);
  text.push(['elapsed', elapsed(s.elapsed_ms)]);
  const width = Math.max(...[...rows, ...text].map(([label]) => label.length));
  // Only figures (a count, a dollar amount) line up; a row of words starts where they start.
  const figure = (v: string): boolean => /^[\d$]/.test(v);
  const valueWidth = Math.max(...rows.filter(([, v]) => figure(v)).map(([, v]) => v.split(' ')[0]?.length ?? 0));
  const title = s.dry_run ? 'dry run: nothing was spent' : s.status === 'done' ? 'done' : s.status;
  const lines = rows.map(([label, value]) => {
    if (!figure(value)) return `  ${label.padEnd(width)}  ${' '.repeat(valueWidth)} ${value}`;
    const [head = '', ...rest] = value.split(' ');
    return `  ${label.padEnd(width)}  ${head.padStart(valueWidth)}${rest.length > 0 ? ` ${rest.join(' ')}` : ''}`;
  });
  for (const [label, value] of text) lines.push(`  ${label.padEnd(width)}  ${value}`);
  return [`enrich: ${title}`, ...lines].join('\n') + '\n';
}

/** The summary fitted to a terminal `columns` wide: long rows break between words, continuations under the value, never a word cut in two. */
export function fitSummary(text: string, columns: number): string {
  if (columns <= 0) return text;
  return text
    .split('\n')
    .map((line) => (line.length <= columns ? line : fitRow(line, columns)))
    .join('\n');
}

function fitRow(line: string, columns: number): string {
  // The label, the gap after it, and a right-aligned figure: where the words start.
  const start = /^ {2}\S+(?: \S+)* {2,}(?:\S+ +)?/.exec(line)?.[0].length;
  if (start === undefined) return wrapWords(line, columns);
  const indent = start <= columns / 2 ? start : 4;
  const lines: string[] = [];
  // A label and figure wider than the terminal: the label alone, then the rest below it.
  const label = (/^ {2}\S+(?: \S+)*/.exec(line)?.[0] ?? '').length;
  const from = start <= columns ? start : label;
  if (from === label) lines.push(line.slice(0, label));
  let current = from === label ? ' '.repeat(indent) : line.slice(0, start);
  let fresh = true;
  for (const word of line.slice(from).split(/ +/).filter((w) => w !== '')) {
    const candidate = fresh ? current + word : `${current} ${word}`;
    if (candidate.length <= columns) current = candidate;
    else {
      lines.push(current.trimEnd());
      current = ' '.repeat(indent) + word;
    }
    fresh = false;
  }
  lines.push(current);
  return lines.join('\n');
}

/** The spec's two codes get their own advice; any other (key_suspended under 401) shows the service's words and code, never one it did not send. */
function authStep(code: string, message: string): string {
  if (code === 'insufficient_scope') return 'the API key lacks the search:read scope (insufficient_scope); use a key that has it, then run the same command';
  if (code === 'invalid_token') return 'the service refused the API key (invalid_token); check ENRICH_API_KEY or --api-key-file, then run the same command';
  return `the service refused the API key: ${message}; sort it out with the service, then run the same command`;
}

/** " (N credits saved)" where the store saved any: a rerun of the same input saves nothing, and says nothing of it. */
const saved = (s: Summary): string => (s.credits_saved > 0 ? ` (${count(s.credits_saved, 'credit')} saved)` : '');

/** Each monthly cap that applies: what it has left, of what, spent and held (store/budget.ts). */
function budgetRows(s: Summary): [string, string][] {
  const b = s.budget;
  if (b === null) return [];
  return b.caps.map((c) => [
    c.person === null ? 'budget' : `budget (${c.person})`,
    `${num(c.left)}   left of ${capName(c.person, b.store_kind === 'team').replace(/ monthly budget$/, '')} ${num(c.cap)} for ${b.month} UTC (${num(c.spent)} spent${c.held > 0 ? `, ${num(c.held)} held by calls not yet settled` : ''})`,
  ]);
}

/** `enrich budget set` as a person would type it for a cap. */
export function raiseCommand(person: string | null): string {
  if (person === null) return 'enrich budget set <credits>';
  return `enrich budget set <credits> --person ${/^[\w.@+-]+$/.test(person) ? person : JSON.stringify(person)}`;
}

/** Said beside a count of credits still needed, when some of those companies may already have been paid for. */
function maybePaid(s: Summary): string {
  if (s.credits_unconfirmed === 0) return '';
  return ` (${count(s.credits_unconfirmed, 'credit')} more may already have been charged for ${s.credits_unconfirmed === 1 ? 'one of them' : 'some of them'}: an answer lost, then only errors under its key)`;
}

/** What happened and what to do next, in one line. Null when there is nothing to add. */
export function nextStep(s: Summary, stop: Stop | null): string | null {
  switch (stop?.reason) {
    case 'interrupted':
      // The summary's title already says "interrupted": say it once.
      return `everything bought is kept in the store (${s.store}); run the same command to finish, nothing is bought twice`;
    case 'credits': {
      if (stop.free) return 'the service refused even the free match for credits (insufficient_credits): the account has no credits or is blocked; top up, then run the same command';
      const balance = stop.balance === null ? '' : `balance ${num(stop.balance)}, `;
      // Refused before anything billable was known to be owed: "needs 0 more credits" would contradict the stop.
      if (s.estimated_credits === 0) return `stopped: the service refused for credits (${balance.replace(/, $/, '') || 'no balance given'}) before anything left was priced; top up, or ask the service, then run the same command to finish`;
      return `stopped: ${balance}needs ${count(s.estimated_credits, 'more credit', 'more credits')}${maybePaid(s)}; top up and run the same command to finish (what was bought is kept)`;
    }
    case 'budget':
      if (stop.declined === true) return `nothing bought: you answered no; the matches are kept. Run it again with --yes, or with --max-credits <n> to cap it`;
      return `stopped at --max-credits ${num(stop.limit)} (the cap on this invocation): ${count(s.estimated_credits, 'more credit', 'more credits')} would finish the job; what was bought is kept, and the next run buys only the rest`;
    case 'monthly': {
      const line = s.budget?.caps.find((c) => c.person === stop.person);
      const figures =
        line === undefined || s.budget === null
          ? `${count(stop.cap, 'credit')} a month`
          : `${count(line.cap, 'credit')} for ${s.budget.month}, ${num(line.spent)} spent${line.held > 0 ? `, ${num(line.held)} held by calls not yet settled (counted as spent)` : ''}, ${num(line.left)} left`;
      const more = s.estimated_credits > 0 ? `${count(s.estimated_credits, 'more credit', 'more credits')} would finish the job; ` : '';
      return `stopped at ${capName(stop.person, s.budget?.store_kind === 'team')}: ${figures}; ${more}raise it with \`${raiseCommand(stop.person)}\`, or wait for next month, then run the same command to finish (what was bought is kept)`;
    }
    case 'unavailable':
      return stop.message;
    case 'auth':
      return authStep(stop.code, stop.message);
    case undefined:
      break;
  }
  if (s.dry_run) {
    if (s.unanswered_domains > 0) {
      return `a real run would spend at least ${count(s.estimated_credits, 'credit')}: ${count(s.unanswered_domains, 'domain')} got no answer from the free match (see enrich_error), so the rest is unknown; run the dry run again`;
    }
    if (s.estimated_credits === 0 && s.left_by_cap === 0) return null;
    const stale = s.stale > 0 ? ` (${num(s.stale)} of them refresh stale records)` : '';
    if (s.left_by_cap > 0) {
      const cap = s.budget?.limits_estimate === true ? 'all the monthly budget has left (enrich budget)' : 'the --max-credits cap';
      if (s.estimated_credits === 0) {
        return `a real run would buy nothing: ${s.budget?.limits_estimate === true ? 'the monthly budget has no room left (enrich budget shows it)' : '--max-credits is 0'}; ${count(s.left_by_cap, 'company waits', 'companies wait')} for a later run`;
      }
      return `a real run would spend ${count(s.estimated_credits, 'credit')}${stale}, ${cap}, and leave ${count(s.left_by_cap, 'company', 'companies')} for a later run; drop --dry-run to go ahead`;
    }
    return `a real run would spend exactly ${count(s.estimated_credits, 'credit')}${stale}; drop --dry-run to go ahead`;
  }
  if (s.errors > 0 && s.at_risk > 0) {
    return `${count(s.errors, 'row')} failed (see enrich_error); ${count(s.at_risk, 'company waits', 'companies wait')} on a paid call whose answer never came (at most ${count(s.at_risk, 'credit')} at risk): run the same command later to finish them; if the service never answers for them, \`enrich ledger release\` lists them and lets them be bought again`;
  }
  if (s.errors > 0 && s.unusable > 0 && s.status === 'done') {
    return `${count(s.errors, 'row')} show${s.errors === 1 ? 's' : ''} bad_response: ${count(s.unusable, 'company', 'companies')} whose paid answer an earlier run could not use (another company's record, or one that contradicts itself) ${s.unusable === 1 ? 'is' : 'are'} not bought again before --miss-max-age (30 days by default); nothing for a rerun to retry`;
  }
  if (s.errors > 0 && s.unusable > 0) {
    return `${count(s.errors, 'row')} failed (see enrich_error): ${count(s.unusable, 'company has', 'companies have')} a paid answer that could not be used (bad_response: another company's record, or one that contradicts itself), its credit spent, and ${s.unusable === 1 ? 'it is' : 'they are'} not bought again before --miss-max-age (30 days by default); run the same command to retry any other`;
  }
  if (s.errors > 0) return `${count(s.errors, 'row')} failed (see enrich_error); run the same command to retry ${s.errors === 1 ? 'it' : 'them'}`;
  return null;
}

/** A month's keys retired as possibly charged, beside the credits charged: one honest figure, and its bound. */
const maxBill = (m: MonthJson): string => (m.bill_max_usd > m.bill_usd ? ` (at most ${dollars(m.bill_max_usd)} if the unconfirmed were charged)` : '');
