import { describe, expect, it } from 'vitest';
import { Tasks } from '../../src/pipeline/tasks.js';

/** A task that settles when told to. */
function pending(): { task: Promise<void>; settle(): void } {
  let settle = (): void => {};
  const task = new Promise<void>((resolve) => (settle = resolve));
  return { task, settle };
}

describe('Tasks (the matches and enriches of a run under way)', () => {
  const signal = new AbortController().signal;

  it('has room below the limit at once; at it, a promise that resolves as a match ends', async () => {
    const w = new Tasks(() => {});
    const a = pending();
    w.track(a.task, true);
    expect(w.room(() => 2, signal)).toBeUndefined();
    w.track(pending().task, true);
    const wait = w.room(() => 2, signal);
    expect(wait).toBeInstanceOf(Promise);
    a.settle();
    await wait;
    expect(w.room(() => 2, signal)).toBeUndefined();
  });

  it('does not count a match waiting out a retry, up to three times the limit', async () => {
    const w = new Tasks(() => {});
    for (let i = 0; i < 2; i++) w.track(pending().task, true);
    const wait = w.room(() => 2, signal);
    expect(wait).toBeInstanceOf(Promise);
    w.rest(true);
    await wait;
    expect(w.room(() => 2, signal)).toBeUndefined();
    w.rest(false);
    expect(w.room(() => 2, signal)).toBeInstanceOf(Promise);
    // Limit 1: eight tracked, all resting; three limits' worth are not counted, five are.
    const busy = new Tasks(() => {});
    for (let i = 0; i < 8; i++) {
      busy.track(pending().task, true);
      busy.rest(true);
    }
    expect(busy.room(() => 1, signal)).toBeInstanceOf(Promise);
  });
});
