import { describe, expect, it } from 'vitest';
import { AGAIN, GroupCommit, type Queued } from '../../src/store/group-commit.js';
import type { Claim, StoreEvent } from '../../src/store/types.js';

const TIMING = { batchMs: 1, batchRows: 1000, intentGatherMs: 0 };
const lookup = (domain: string): StoreEvent => ({ type: 'match', domain, status: 'miss' });
const intent = (company: string): StoreEvent => ({ type: 'intent', company, generation: 1, keyVersion: 1, key: `k-${company}` }) as StoreEvent;

describe('GroupCommit', () => {
  it('answers the events of a batch once it is written, intents with their own claims', async () => {
    const batches: StoreEvent[][] = [];
    const group = new GroupCommit(async (batch: readonly Queued[]) => {
      batches.push(batch.map((p) => p.event));
      return batch.map((p): Claim => (p.durable ? { kind: 'busy' } : { kind: 'ok' }));
    }, (e) => e as Error, TIMING);
    const a = group.append(lookup('a.com'));
    const b = group.append(lookup('b.com'));
    const claim = group.append(intent('c.com'), true);
    expect(await a).toEqual({ kind: 'ok' });
    expect(await b).toEqual({ kind: 'ok' });
    expect(await claim).toEqual({ kind: 'busy' });
    expect(batches.flat()).toHaveLength(3);
  });

  it('an event queued again is answered only once a later commit has written it', async () => {
    let commits = 0;
    const group = new GroupCommit(async (batch: readonly Queued[]) => {
      commits++;
      return batch.map((p) => (commits === 1 && !p.durable ? AGAIN : { kind: 'ok' as const }));
    }, (e) => e as Error, TIMING);
    const written = group.append(lookup('a.com'));
    await written;
    expect(commits).toBe(2);
  });

  it('a failed commit fails every event of its batch and every later one', async () => {
    const group = new GroupCommit(async () => {
      throw new Error('disk full');
    }, (e) => e as Error, TIMING);
    const a = group.append(lookup('a.com'));
    const claim = group.append(intent('b.com'), true);
    await expect(a).rejects.toThrow('disk full');
    await expect(claim).rejects.toThrow('disk full');
    await expect(group.append(lookup('c.com'))).rejects.toThrow('disk full');
    await expect(group.flush()).rejects.toThrow('disk full');
  });
});

describe('GroupCommit failed while a batch is out', () => {
  it('fails an event the batch asks again for, rather than leave it waiting for ever', async () => {
    let release = (): void => {};
    const out = new Promise<void>((resolve) => (release = resolve));
    let sent = false;
    const group = new GroupCommit(async (batch: readonly Queued[]) => {
      sent = true;
      await out;
      return batch.map(() => AGAIN);
    }, (e) => e as Error, TIMING);
    const claim = group.append(intent('a.com'), true);
    const lookupWritten = group.append(lookup('b.com'));
    // Until the batch is out: its commit called, and held.
    while (!sent) await new Promise((r) => setTimeout(r, 1));
    group.fail(new Error('lease lost'));
    release();
    await expect(claim).rejects.toThrow('lease lost');
    await expect(lookupWritten).rejects.toThrow('lease lost');
    await expect(group.flush()).rejects.toThrow('lease lost');
  });
});
