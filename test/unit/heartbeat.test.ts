import { afterEach, describe, expect, it, vi } from 'vitest';
import { Heartbeat, HEARTBEAT_MS } from '../../src/store/heartbeat.js';

/** The run's lease (store/heartbeat.ts), shared by both backends, on fake timers and a fake steady clock. */
describe('a run’s heartbeat', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('lapses only after beats failed for a lease, judged on the steady clock; a lapse beats at once', async () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval', 'hrtime', 'Date'] });
    let failing = false;
    const writes: number[] = [];
    const beat = new Heartbeat(() => {
      if (failing) throw new Error('SQLITE_BUSY');
      writes.push(Date.now());
    }, 45_000);
    beat.start();
    await vi.advanceTimersByTimeAsync(HEARTBEAT_MS * 3);
    expect(writes).toHaveLength(3);
    expect(beat.lapsed()).toBe(false);
    // The store stays busy: no beat lands for longer than the lease less one interval.
    failing = true;
    await vi.advanceTimersByTimeAsync(40_000);
    expect(writes).toHaveLength(3);
    failing = false;
    expect(beat.lapsed()).toBe(true);
    await vi.advanceTimersByTimeAsync(0);
    expect(writes).toHaveLength(4);
    expect(beat.lapsed()).toBe(false);
    // A wall clock moved on a day (NTP, a laptop's lid) is no lapse: only the steady clock counts.
    vi.setSystemTime(Date.now() + 86_400_000);
    expect(beat.lapsed()).toBe(false);
    beat.stop();
    await vi.advanceTimersByTimeAsync(HEARTBEAT_MS * 2);
    expect(writes).toHaveLength(4);
  });
});
