import { UsageError } from '../errors.js';
import { capName, MAX_CAP, personName, type BudgetLine, type BudgetView } from '../store/budget.js';
import type { LedgerStore } from '../store/ledger-types.js';
import { count, num } from '../ui/format.js';
import { raiseCommand } from '../ui/summary.js';
import { formatTable } from './ledger-format.js';

/** `enrich budget [set <credits> | clear] [--person <name>]`: one change (credits null: clear), or none (show). */
export interface BudgetAction {
  kind: 'budget';
  change?: { person: string | null; credits: number | null };
}

/** `enrich budget`: shows this month's caps, or sets or clears one, then shows where it stands. */
export async function budgetCommand(store: LedgerStore, action: BudgetAction, team: boolean, json: boolean, env: NodeJS.ProcessEnv, print: (s: string) => void): Promise<void> {
  let did = true;
  const change = action.change === undefined ? undefined : { ...action.change, person: action.change.person?.trim() ?? null };
  if (change !== undefined) {
    if (change.person === '') throw new UsageError('--person needs a name (as ENRICH_USER or the login name gives it)');
    if (change.person?.startsWith('-') === true) throw new UsageError(`--person takes a name, not an option ('${change.person}' given)`);
    if (change.credits !== null && (!Number.isInteger(change.credits) || change.credits < 0 || change.credits > MAX_CAP)) throw new UsageError(`a budget is a whole number of credits from 0 to ${num(MAX_CAP)}`);
    did = await store.setBudget(change.person, change.credits, personName(env));
  }
  const view = await store.budget();
  if (json) return print(JSON.stringify(budgetJson(view, store.shown, team), null, 2));
  if (change !== undefined) print(did ? changed(view, change, team) : `${capName(change.person, team)} was not set: nothing to clear`);
  print(formatView(view, store.shown, team));
}

const lineJson = (l: BudgetLine): Record<string, unknown> => ({ person: l.person, cap: l.cap, spent: l.spent, held: l.held, left: l.left });

export function budgetJson(view: BudgetView, shown: string, team: boolean): Record<string, unknown> {
  return {
    store: shown,
    store_kind: team ? 'team' : 'store',
    month: view.month,
    since: new Date(view.since).toISOString(),
    until: new Date(view.until).toISOString(),
    ...lineJson(view.store),
    services: view.services,
    people: view.people.map(lineJson),
  };
}

function changed(view: BudgetView, change: NonNullable<BudgetAction['change']>, team: boolean): string {
  const name = capName(change.person, team);
  if (change.credits === null) return `${name} is clear: ${change.person === null ? `no cap on the ${team ? "team's" : "store's"} month as a whole (a person's cap, if set, still holds)` : `${change.person}'s runs are capped only by the ${team ? "team's" : "store's"} budget, if one is set`}`;
  const line = change.person === null ? view.store : view.people.find((l) => l.person === change.person);
  const left = line?.left ?? 0;
  return `${name} is now ${count(change.credits, 'credit')} for ${view.month}: ${num(left)} left; every run, live ones too, meets it at its next purchase`;
}

function formatView(view: BudgetView, shown: string, team: boolean): string {
  const cell = (n: number | null): string => (n === null ? '-' : num(n));
  const rows: string[][] = [[team ? 'the team' : 'the store', cell(view.store.cap), num(view.store.spent), num(view.store.held), cell(view.store.left)]];
  for (const s of view.services) rows.push([`  ${s.service}`, '', num(s.spent), num(s.held), '']);
  for (const p of view.people) rows.push([p.person ?? '', cell(p.cap), num(p.spent), num(p.held), cell(p.left)]);
  const lines = [`monthly budget for ${view.month} (UTC, by the store's clock) of ${shown}`, formatTable(['', 'cap', 'spent', 'held', 'left'], rows, new Set([1, 2, 3, 4]))];
  if (view.store.held > 0) lines.push('held: calls in flight or whose answer was lost, and keys given up on purchases still open: counted as spent until each settles');
  if (view.store.cap === null && view.people.length === 0) lines.push(`no cap is set: set one with \`${raiseCommand(null)}\` (a person's with --person <name>)`);
  lines.push('spent: what enrich saw this store\'s runs spend; not other tools on the same account (docs/budgets.md)');
  return lines.join('\n');
}
