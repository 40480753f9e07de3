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
