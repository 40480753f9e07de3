import { describe, expect, it } from 'vitest';
import { systemClock } from '../../src/pipeline/clock.js';

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
    const spinning = new AbortController();
    const near = systemClock.until(systemClock.now() + 1, spinning.signal);
    spinning.abort(new Error('stop'));
    await expect(near).rejects.toThrow();
  });
});
