import { describe, expect, it } from 'vitest';
import { LaneQueue } from '../../src/pipeline/lanes.js';

/** A task that records when it starts and ends when told to. */
function held(started: string[], name: string): { task: () => Promise<string>; end(): void } {
  let end = (): void => {};
  const done = new Promise<void>((resolve) => (end = resolve));
  return {
    task: async () => {
      started.push(name);
      await done;
      return name;
    },
    end,
  };
}

const settle = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe('LaneQueue', () => {
  it('runs at most its concurrency, waiting enriches before matches, in order within a lane', async () => {
    const started: string[] = [];
    const q = new LaneQueue(1);
    const m1 = held(started, 'm1');
    const m2 = held(started, 'm2');
    const e1 = held(started, 'e1');
    const e2 = held(started, 'e2');
    const results = [q.add('match', m1.task), q.add('match', m2.task), q.add('enrich', e1.task), q.add('enrich', e2.task)];
    expect(started).toEqual(['m1']);
    expect(q.pending).toBe(1);
    m1.end();
    await settle();
    expect(started).toEqual(['m1', 'e1']);
    e1.end();
    await settle();
    expect(started).toEqual(['m1', 'e1', 'e2']);
    e2.end();
    await settle();
    m2.end();
    expect(await Promise.all(results)).toEqual(['m1', 'm2', 'e1', 'e2']);
    expect(q.pending).toBe(0);
  });

  it('in the end game runs waiting matches first, never keeping an enrich past its bound', async () => {
    const started: string[] = [];
    let now = 0;
    const q = new LaneQueue(1, () => now);
    q.matchesFirst = 3000;
    const first = held(started, 'm0');
    void q.add('match', first.task);
    const e1 = held(started, 'e1');
    const m1 = held(started, 'm1');
    const m2 = held(started, 'm2');
    void q.add('enrich', e1.task);
    void q.add('match', m1.task);
    void q.add('match', m2.task);
    first.end();
    await settle();
    expect(started).toEqual(['m0', 'm1']); // the match, though the enrich came first
    now = 3001; // e1 has waited past the bound: it goes before m2
    m1.end();
    await settle();
    expect(started).toEqual(['m0', 'm1', 'e1']);
    e1.end();
    await settle();
    expect(started).toEqual(['m0', 'm1', 'e1', 'm2']);
    m2.end();
  });

  it("starts waiting tasks when its concurrency grows; passes a task's failure to its caller", async () => {
    const started: string[] = [];
    const q = new LaneQueue(1);
    const a = held(started, 'a');
    const b = held(started, 'b');
    void q.add('match', a.task);
    void q.add('match', b.task);
    expect(started).toEqual(['a']);
    q.concurrency = 2;
    expect(started).toEqual(['a', 'b']);
    a.end();
    b.end();
    await expect(q.add('enrich', async () => Promise.reject(new Error('refused')))).rejects.toThrow('refused');
  });
});
