import { userInfo } from 'node:os';

/**
 * Monthly caps (docs/budgets.md), store-wide and per person, by the store's UTC clock. An intent is the
 * reservation: written only if its price fits under every cap. A cap counts credits spent this month plus
 * those held by open purchases an attempt may have gone under (budgetUsedSql, the same in both dialects).
 */

/** Credits a company enrich costs (spec 8.4: 1 per match): the price every intent reserves. */
export const ENRICH_PRICE = 1;

/** The login name, else $USER (a container's uid may have no passwd entry), else empty. */
export function loginName(env: NodeJS.ProcessEnv = process.env): string {
  try {
    return userInfo().username;
  } catch {
    return env['USER'] ?? '';
  }
}

/** The person a store's runs are counted under: ENRICH_USER, else the login name, else ''. */
export function personName(env: NodeJS.ProcessEnv): string {
  const named = env['ENRICH_USER']?.trim();
  return named !== undefined && named !== '' ? named : loginName(env);
}

/** The calendar month (UTC) `now` falls in: [since, until) in ms, and its name (YYYY-MM). */
export function monthOf(now: number): { since: number; until: number; name: string } {
  const d = new Date(now);
  const y = d.getUTCFullYear();
  const m = d.getUTCMonth();
  return { since: Date.UTC(y, m, 1), until: Date.UTC(y, m + 1, 1), name: `${y}-${String(m + 1).padStart(2, '0')}` };
}

/** The cap a reservation met: the store's (person null) or a person's. */
export interface CapMet {
  person: string | null;
  cap: number;
}

/** What is left under the tightest cap that applies to a run, as one transaction read it. */
export interface Room extends CapMet {
  left: number;
}

/** One cap's month: what it allows, what is spent and held under it, and what is left. */
export interface BudgetLine {
  /** null: the store's own cap (the whole team on a team store). */
  person: string | null;
  cap: number | null;
  spent: number;
  held: number;
  /** cap - spent - held, never below 0; null without a cap. */
  left: number | null;
}

/** A service's share of the store's month (no cap of its own). */
export interface ServiceMonth {
  service: string;
  spent: number;
  held: number;
}

/** `enrich budget`: the month, the store's line, its services, and each person with a cap. */
export interface BudgetView {
  month: string;
  since: number;
  until: number;
  store: BudgetLine;
  services: ServiceMonth[];
  people: BudgetLine[];
}

/** The open purchases that may hold credits (an index, purchases_held, covers exactly these). */
const HELD = `p.outcome = 'open' AND (p.intent_key IS NOT NULL OR p.uncertain = 1 OR p.unconfirmed > 0)`;

/** An open purchase an attempt may be under holds its reservation; one with none recorded (older, copied, imported) holds the price all the same. */
const HOLDS = `CASE WHEN p.intent_key IS NOT NULL OR p.uncertain = 1 THEN (CASE WHEN p.reserved > 0 THEN p.reserved ELSE ${ENRICH_PRICE} END) ELSE 0 END`;

/** Spent and held under each cap row `b` (the store's '' row counts every purchase, a person's only theirs); `ph(n)`: placeholder, 1 since, 2 until. */
export function budgetUsedSql(ph: (n: number) => string): string {
  const whose = `(b.person = '' OR p.person = b.person)`;
  return `
  (SELECT coalesce(sum(p.credits + p.unconfirmed), 0) FROM purchases p
     WHERE p.closed_at >= ${ph(1)} AND p.closed_at < ${ph(2)} AND p.outcome <> 'open' AND ${whose}) AS spent,
  (SELECT coalesce(sum(${HOLDS} + p.unconfirmed), 0) FROM purchases p
     WHERE ${HELD} AND ${whose}) AS held`;
}

/** The caps that apply to run ph(3) (the store's, its person's), with this month's spent and held. */
export const runBudgetSql = (ph: (n: number) => string): string =>
  `SELECT b.person, b.credits, ${budgetUsedSql(ph)} FROM budgets b WHERE b.person = '' OR b.person = (SELECT r."user" FROM runs r WHERE r.id = ${ph(3)})`;

export interface CapRow {
  person: string;
  credits: number;
  spent: number;
  held: number;
}

export const capRow = (r: readonly unknown[]): CapRow => ({ person: String(r[0]), credits: Number(r[1]), spent: Number(r[2]), held: Number(r[3]) });

export function budgetLine(person: string | null, cap: number | null, spent: number, held: number): BudgetLine {
  return { person, cap, spent, held, left: cap === null ? null : Math.max(0, cap - spent - held) };
}

export const lineOf = (r: CapRow): BudgetLine => budgetLine(r.person === '' ? null : r.person, r.credits, r.spent, r.held);

/** The tightest of a run's cap lines: the room its next reservation has; null when no cap applies. */
export function roomOf(lines: readonly CapRow[]): Room | null {
  let room: Room | null = null;
  for (const l of lines) {
    const left = l.credits - l.spent - l.held;
    if (room === null || left < room.left) room = { person: l.person === '' ? null : l.person, cap: l.credits, left };
  }
  return room;
}

/** The shown name of a cap: the store's, or a person's. */
export const capName = (person: string | null, team: boolean): string => (person === null ? (team ? "the team's monthly budget" : "the store's monthly budget") : `${person}'s monthly budget`);

/** `enrich budget`'s reads: every cap's line (the store's first, credits null without a cap), and each service's share of the month. */
export const budgetLinesSql = (ph: (n: number) => string): string =>
  `SELECT b.person, b.credits, ${budgetUsedSql(ph)}
     FROM (SELECT '' AS person, (SELECT credits FROM budgets WHERE person = '') AS credits
           UNION ALL SELECT person, credits FROM budgets WHERE person <> '') b
    ORDER BY b.person`;

export const serviceMonthSql = (ph: (n: number) => string): string =>
  `SELECT s.name,
     coalesce(sum(CASE WHEN p.outcome <> 'open' THEN p.credits + p.unconfirmed ELSE 0 END), 0) AS spent,
     coalesce(sum(CASE WHEN p.outcome = 'open' THEN ${HOLDS} + p.unconfirmed ELSE 0 END), 0) AS held
   FROM purchases p JOIN services s ON s.id = p.service
   WHERE (p.outcome <> 'open' AND p.closed_at >= ${ph(1)} AND p.closed_at < ${ph(2)}) OR (${HELD})
   GROUP BY s.name ORDER BY s.name`;

/** The view from the two reads' rows (arrays, in their columns' order). */
export function budgetView(now: number, lines: readonly unknown[][], services: readonly unknown[][]): BudgetView {
  const { since, until, name } = monthOf(now);
  const all = lines.map((r) => budgetLine(String(r[0]) === '' ? null : String(r[0]), r[1] === null || r[1] === undefined ? null : Number(r[1]), Number(r[2]), Number(r[3])));
  const store = all.find((l) => l.person === null) ?? budgetLine(null, null, 0, 0);
  return {
    month: name,
    since,
    until,
    store,
    services: services.map((r) => ({ service: String(r[0]), spent: Number(r[1]), held: Number(r[2]) })).filter((s) => s.spent > 0 || s.held > 0),
    people: all.filter((l) => l.person !== null),
  };
}

/** The largest cap `enrich budget set` takes. */
export const MAX_CAP = 2_000_000_000;
