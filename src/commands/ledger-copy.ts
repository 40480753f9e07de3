import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { UsageError } from '../errors.js';
import { fileIdentity } from '../io/paths.js';
import { copyStore, type Copied } from '../store/copy.js';
import type { LedgerOpen, LedgerStore } from '../store/ledger-types.js';
import { openLedgerStore, storeExists } from '../store/open.js';
import { displayStore, isTeamStore } from '../store/path.js';
import { count } from '../ui/format.js';

type How = Omit<LedgerOpen, 'write' | 'create'>;

/**
 * `enrich ledger copy <from> <to>`: merges one store into another, buying and counting nothing twice (store/copy.ts); the source is only
 * read. A dry run decides every row as the copy would and writes nothing (against an empty stand-in if there is no target), so its counts are exact.
 */
export async function copyStores(action: { from: string; to: string; dryRun: boolean }, json: boolean, how: How, print: (s: string) => void): Promise<void> {
  const { from, to, dryRun } = action;
  if (!isTeamStore(from) && !isTeamStore(to) && fileIdentity(from) === fileIdentity(to)) throw sameStore(from, to);
  if (!(await storeExists(from))) throw new UsageError(`ledger copy: no store at ${displayStore(from)}: nothing to copy`);
  const source = await openLedgerStore(from, { ...how, write: false, create: false });
  let standIn: string | null = null;
  try {
    const targetThere = await storeExists(to);
    // A dry run makes nothing: a target not there yet is played by an empty store in a temp folder.
    if (dryRun && !targetThere) standIn = mkdtempSync(join(tmpdir(), 'enrich-copy-'));
    const writes = !dryRun || standIn !== null;
    const target = await openLedgerStore(standIn === null ? to : join(standIn, 'store.db'), { ...how, write: writes, create: writes });
    try {
      if ((await source.identity()) === (await target.identity())) throw sameStore(from, to);
      const copied = await copyInto(source, target, dryRun);
      report(copied, { from, to, dryRun, created: !targetThere }, json, print);
    } catch (error) {
      throw target.explain(source.explain(error));
    } finally {
      await target.close();
    }
  } finally {
    await source.close();
    if (standIn !== null) rmSync(standIn, { recursive: true, force: true });
  }
}

const sameStore = (from: string, to: string): UsageError =>
  new UsageError(`ledger copy: ${displayStore(from)} and ${displayStore(to)} are the same store; give the store to copy from, then another to copy into`);

async function copyInto(source: LedgerStore, target: LedgerStore, dryRun: boolean): Promise<Copied> {
  const into = await target.copyTarget(dryRun);
  try {
    const reading = await source.copySource();
    try {
      return await copyStore(reading, into);
    } finally {
      await reading.end();
    }
  } finally {
    await into.end();
  }
}

function report(c: Copied, where: { from: string; to: string; dryRun: boolean; created: boolean }, json: boolean, print: (s: string) => void): void {
  const from = displayStore(where.from);
  const to = displayStore(where.to);
  if (json) {
    return print(
      JSON.stringify({
        from,
        to,
        dry_run: where.dryRun,
        services: c.services,
        companies: c.companies,
        lookups: c.lookups,
        purchases: c.closed,
        open_purchases: c.open,
        runs: c.runs,
        credits: c.credits,
        credits_unconfirmed: c.unconfirmed,
        conflicts: c.conflicts,
        conflict_credits: c.conflictCredits,
        busy: c.busy,
        unsettled: c.unsettled,
      }),
    );
  }
  // Nothing moved, and nothing the target holds differently: it holds all the source does.
  const nothing = c.companies + c.lookups + c.closed + c.open + c.runs === 0 && c.conflicts + c.unsettled + c.busy === 0;
  const unconfirmed = c.unconfirmed > 0 ? `, up to ${count(c.unconfirmed, 'credit')} more possibly charged` : '';
  const what = nothing
    ? `nothing new (${to} already holds everything ${from} does)`
    : `${count(c.companies, 'company', 'companies')}, ${count(c.lookups, 'lookup')}, ${count(c.closed, 'closed purchase')} (${count(c.credits, 'credit')} spent${unconfirmed}), ${count(c.open, 'open purchase')} and ${count(c.runs, 'run')} from ${from} into ${to}${where.created ? ' (a new store)' : ''}`;
  const lines = [where.dryRun ? `would copy ${what}; nothing was written` : `copied ${what}`];
  if (c.open > 0) lines.push(`${count(c.open, 'open purchase stays', 'open purchases stay')} open under ${c.open === 1 ? 'its own key' : 'their own keys'}: the next run on ${to} finishes ${c.open === 1 ? 'it' : 'them'} without buying again what may have been charged`);
  if (c.conflicts > 0) {
    lines.push(
      `${count(c.conflicts, 'purchase was', 'purchases were')} closed in both stores, differently (each store bought the same company's generation): ${to} keeps its own, and the ${count(c.conflictCredits, 'credit')} ${from} spent on ${c.conflicts === 1 ? 'it are' : 'them are'} not counted there`,
    );
  }
  if (c.unsettled > 0) {
    lines.push(
      `${count(c.unsettled, 'purchase is', 'purchases are')} open in both stores under different keys, each of which may have been charged: ${to} keeps its own. To settle ${from}'s, list ${c.unsettled === 1 ? 'it' : 'them'} with \`enrich ledger release --store ${from}\`, run enrich on ${from} over just ${c.unsettled === 1 ? 'that domain' : 'those domains'} (it replays each key, buying nothing else), then copy again`,
    );
  }
  if (c.busy > 0) lines.push(`${count(c.busy, 'purchase is', 'purchases are')} being bought right now by a run on ${to}: left to it (copy again once it has finished)`);
  print(lines.join('\n'));
}
