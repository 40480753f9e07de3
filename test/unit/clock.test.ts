import { describe, expect, it } from 'vitest';
import { preciseUntil, systemClock } from '../../src/pipeline/clock.js';

describe('systemClock.sleep', () => {
  it('takes a pause past 2^31-1 ms as a long sleep, not an instant timer that warns', async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error): void => void warnings.push(w.name);
    process.on('warning', onWarning);
    try {
      const controller = new AbortController();
      let settled = false;
      const sleeping = systemClock.sleep(86_400_000 * 40, controller.signal).finally(() => (settled = true));
      // Had the timer overflowed it would fire on the next turn of the event loop.
      await new Promise((resolve) => setImmediate(resolve));
      await new Promise((resolve) => setTimeout(resolve, 5));
      expect(settled).toBe(false);
      controller.abort(new Error('stop'));
      await expect(sleeping).rejects.toThrow();
      expect(warnings).not.toContain('TimeoutOverflowWarning');
    } finally {
      process.off('warning', onWarning);
    }
  });
});

describe('systemClock.until', () => {
  it('never resolves before its deadline, and stops when aborted', async () => {
    // Only the direction is asserted (never early); how late depends on the machine.
    for (let i = 0; i < 20; i++) {
      const deadline = systemClock.now() + (i % 4) * 0.7 + 0.3;
      await systemClock.until(deadline);
      expect(systemClock.now()).toBeGreaterThanOrEqual(deadline);
    }
    const controller = new AbortController();
    const waiting = systemClock.until(systemClock.now() + 60_000, controller.signal);
    controller.abort(new Error('stop'));
    await expect(waiting).rejects.toThrow();
  });

  // Driven by progress: its clock stands still.
  it('stops when aborted in its last stretch of event-loop turns', async () => {
    const spinning = new AbortController();
    let turns = 0;
    // Half a millisecond before the deadline for as long as the test likes: the wait spins.
    const near = preciseUntil(100, spinning.signal, () => {
      if (++turns === 3) spinning.abort(new Error('stop'));
      return 99.5;
    });
    await expect(near).rejects.toThrow('stop');
    expect(turns).toBe(3);
    // An abort seen only once the deadline has passed still rejects: it came while the wait was on.
    const late = new AbortController();
    const passed = preciseUntil(100, late.signal, () => {
      late.abort(new Error('late'));
      return 101;
    });
    await expect(passed).rejects.toThrow('late');
  });
});
