import type { Spend, SpendBy, SpendRow } from '../store/ledger-types.js';
import { count, num } from '../ui/format.js';
import { formatTable } from './ledger-format.js';

/** A group's name in the table: no run closed the purchases of the null group (enrich 0.1's, imported). */
const label = (group: string | null): string => group ?? '(imported)';

/** Months in order; people and inputs by what they spent, most first (ties by name): the same order on either backend. */
function ordered(rows: readonly SpendRow[], by: SpendBy): SpendRow[] {
  const name = (r: SpendRow): string => r.group ?? '\uffff';
  const byNameOnly = (a: SpendRow, b: SpendRow): number => (name(a) < name(b) ? -1 : name(a) > name(b) ? 1 : 0);
  return [...rows].sort(by === 'month' ? byNameOnly : (a, b) => b.credits + b.unconfirmed - (a.credits + a.unconfirmed) || byNameOnly(a, b));
}

interface ServiceSpend {
  service: string;
  rows: SpendRow[];
  total: { credits: number; bought: number; unconfirmed: number; companies: number };
  open: { purchases: number; unconfirmed: number };
}

function perService(spend: Spend, by: SpendBy): ServiceSpend[] {
  const services = [...new Set([...spend.rows.map((r) => r.service), ...spend.open.map((o) => o.service)])];
  return services.map((service) => {
    const rows = ordered(
      spend.rows.filter((r) => r.service === service),
      by,
    );
    const sums = rows.reduce((t, r) => ({ credits: t.credits + r.credits, bought: t.bought + r.bought, unconfirmed: t.unconfirmed + r.unconfirmed }), { credits: 0, bought: 0, unconfirmed: 0 });
    const total = { ...sums, companies: spend.companies.find((c) => c.service === service)?.companies ?? 0 };
    const open = spend.open.find((o) => o.service === service) ?? { purchases: 0, unconfirmed: 0 };
    return { service, rows, total, open: { purchases: open.purchases, unconfirmed: open.unconfirmed } };
  });
}

/**
 * `enrich ledger spend`: closed purchases' credits as the month's bill counts them, by person (user@host of the closing run), input or
 * month (UTC); keys retired as possibly charged apart; and what unfinished purchases may yet cost, never counted as spent.
 */
export function showSpend(spend: Spend, by: SpendBy, shown: string, json: boolean, print: (s: string) => void): void {
  const services = perService(spend, by);
  if (json) {
    const out = services.map((s) => ({
      service: s.service,
      groups: s.rows.map((r) => ({ [by]: r.group, credits: r.credits, bought: r.bought, unconfirmed: r.unconfirmed })),
      total: s.total,
      at_risk: { purchases: s.open.purchases, unconfirmed: s.open.unconfirmed },
    }));
    return print(JSON.stringify({ store: shown, by, services: out }, null, 2));
  }
  const lines = [`store      ${shown}`];
  if (services.length === 0) lines.push('           nothing spent yet');
  for (const s of services) {
    lines.push('', `service    ${s.service}`, '');
    const table = s.rows.map((r) => [label(r.group), num(r.credits), num(r.bought), num(r.unconfirmed)]);
    table.push(['total', num(s.total.credits), num(s.total.bought), num(s.total.unconfirmed)]);
    lines.push(formatTable([by, 'credits', 'bought', 'unconfirmed'], table, new Set([1, 2, 3])), '');
    lines.push(totalLine(s, by));
    if (s.open.purchases + s.open.unconfirmed > 0) {
      lines.push(
        `not yet    up to ${count(s.open.purchases + s.open.unconfirmed, 'credit')} more on unfinished purchases (${count(s.open.purchases, 'key')} that may have been charged unseen, ${num(s.open.unconfirmed)} retired as possibly charged): a rerun finishes them under their own keys; \`enrich ledger release\` lists them`,
      );
    }
  }
  print(lines.join('\n'));
}

function totalLine(s: ServiceSpend, by: SpendBy): string {
  const groups = s.rows.length;
  const over = by === 'month' ? `over ${count(groups, 'month')}` : by === 'person' ? `by ${count(groups, 'person', 'people')}` : `on ${count(groups, 'input')}`;
  const unconfirmed = s.total.unconfirmed > 0 ? `; up to ${count(s.total.unconfirmed, 'credit')} more may have been charged unseen (keys retired as possibly charged, unconfirmed)` : '';
  // A company bought again (--fresh, --max-age) is one company and two purchases: said so.
  const what = s.total.bought === s.total.companies ? `${count(s.total.bought, 'company', 'companies')} bought` : `${count(s.total.bought, 'purchase')} of ${count(s.total.companies, 'company', 'companies')}`;
  return `spent      ${count(s.total.credits, 'credit')} ${over}, for ${what}${unconfirmed}`;
}
