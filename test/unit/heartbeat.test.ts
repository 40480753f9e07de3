import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { Heartbeat, HEARTBEAT_MS } from '../../src/store/heartbeat.js';
import { Store } from '../../src/store/sqlite/store.js';
import { tempDir } from '../helpers/cli.js';
import { runInfo } from '../helpers/records.js';

/** The run's lease (store/heartbeat.ts), shared by both backends, on fake timers and clocks of the test's own. */
describe('a run’s heartbeat', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  const LEASE = 45_000;
  function setUp(): { beat: Heartbeat; writes: number[]; clocks: { wall: number; steady: number }; fail(on: boolean): void } {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    const clocks = { wall: 1_000_000, steady: 0 };
    let failing = false;
    const writes: number[] = [];
    const beat = new Heartbeat(
      () => {
        if (failing) throw new Error('SQLITE_BUSY');
        writes.push(clocks.wall);
      },
      LEASE,
      { now: () => clocks.wall, monotonic: () => clocks.steady },
    );
    beat.start();
    return { beat, writes, clocks, fail: (on) => (failing = on) };
  }
  /** Time going by on both clocks, timers firing. */
  const pass = async (c: { wall: number; steady: number }, ms: number): Promise<void> => {
    for (let left = ms; left > 0; left -= 1_000) {
      c.wall += 1_000;
      c.steady += 1_000;
      await vi.advanceTimersByTimeAsync(1_000);
    }
  };

  it('lapses once beats failed for a lease less an interval, and beats at once when asked', async () => {
    const { beat, writes, clocks, fail } = setUp();
    await pass(clocks, HEARTBEAT_MS * 3);
    expect(writes).toHaveLength(3);
    expect(beat.lapsed()).toBe(false);
    fail(true);
    await pass(clocks, 40_000);
    expect(writes).toHaveLength(3);
    fail(false);
    expect(beat.lapsed()).toBe(true);
    // Written synchronously: the next send does not claim again.
    expect(writes).toHaveLength(4);
    expect(beat.lapsed()).toBe(false);
    beat.stop();
    await pass(clocks, HEARTBEAT_MS * 2);
    expect(writes).toHaveLength(4);
  });

  // Suspended: the wall clock moved, the steady clock did not.
  it('lapses over a suspended machine, and over a stalled process whose wall clock went back', async () => {
    const { beat, clocks } = setUp();
    // The lid closed for an hour: other hosts saw no beat, and may have taken the claims over.
    clocks.wall += 3_600_000;
    expect(beat.lapsed()).toBe(true);
    expect(beat.lapsed()).toBe(false);
    // A process stopped (Ctrl-Z) for a minute while NTP set the wall clock back.
    clocks.steady += 60_000;
    clocks.wall -= 5_000;
    expect(beat.lapsed()).toBe(true);
    beat.stop();
  });

  it('dates a beat when it was sent, not when its answer came, and sends one at a time', async () => {
    const clocks = { wall: 1_000_000, steady: 0 };
    let answer!: () => void;
    let writes = 0;
    const beat = new Heartbeat(
      () => {
        writes++;
        return new Promise<void>((resolve) => (answer = resolve));
      },
      LEASE,
      { now: () => clocks.wall, monotonic: () => clocks.steady },
    );
    const pass = (ms: number): void => {
      clocks.wall += ms;
      clocks.steady += ms;
    };
    pass(40_000);
    expect(beat.lapsed()).toBe(true);
    expect(beat.lapsed()).toBe(true);
    expect(writes).toBe(1);
    // The answer comes 30 s late: the row the other hosts read was written 30 s ago.
    pass(30_000);
    answer();
    await beat.renew().catch(() => {});
    expect(writes).toBe(1);
    pass(10_000);
    // Before: dated at the answer, the lease looked 10 s old; by the row, it is 40 s old.
    expect(beat.lapsed()).toBe(true);
  });

  // After a sleep, the overdue tick beats first.
  it('counts a lapse its own timer found, so claims made before it are made again', async () => {
    const { beat, clocks } = setUp();
    expect(beat.epoch).toBe(0);
    clocks.wall += 120_000;
    clocks.steady += 120_000;
    await vi.advanceTimersByTimeAsync(HEARTBEAT_MS);
    // The lease is fresh again, but every claim made before the sleep is of an earlier epoch.
    expect(beat.lapsed()).toBe(false);
    expect(beat.epoch).toBe(1);
    // A beat on time is no lapse.
    clocks.wall += HEARTBEAT_MS;
    clocks.steady += HEARTBEAT_MS;
    await vi.advanceTimersByTimeAsync(HEARTBEAT_MS);
    expect(beat.epoch).toBe(1);
    beat.stop();
  });

  // The row others read stayed old until it landed.
  it('counts a lapse found by a beat sent within the lease that landed after it', async () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    const clocks = { wall: 1_000_000, steady: 0 };
    let land!: () => void;
    const beat = new Heartbeat(() => new Promise<void>((resolve) => (land = resolve)), LEASE, { now: () => clocks.wall, monotonic: () => clocks.steady });
    beat.start();
    clocks.wall += 30_000;
    clocks.steady += HEARTBEAT_MS;
    await vi.advanceTimersByTimeAsync(HEARTBEAT_MS);
    // Sent at 30 s (within the lease), landed at 50 s (past it): before, no lapse was counted.
    clocks.wall += 20_000;
    clocks.steady += 20_000;
    land();
    await beat.renew();
    expect(beat.epoch).toBe(1);
    beat.stop();
  });

  it('renews on asking, and rejects when the beat cannot be written', async () => {
    let fail = false;
    const beat = new Heartbeat(
      () => {
        if (fail) throw new Error('SQLITE_READONLY');
      },
      LEASE,
      { now: () => 0, monotonic: () => 0 },
    );
    await beat.renew();
    fail = true;
    await expect(beat.renew()).rejects.toThrow('SQLITE_READONLY');
  });

  it('a SQLite run whose wall clock moved on an hour (a suspend) says its lease may have lapsed', () => {
    const dir = tempDir();
    let wall = Date.now();
    const store = Store.open(join(dir.path, 'store.db'), { tool: 'test', now: () => wall });
    try {
      const run = store.beginRun('svc', runInfo);
      expect(run.leaseLapsed()).toBe(false);
      wall += 3_600_000;
      expect(run.leaseLapsed()).toBe(true);
      expect(run.leaseLapsed()).toBe(false);
      void run.endRun({ status: 'done', credits: 0, bought: 0, reused: 0 });
    } finally {
      store.close();
      dir.cleanup();
    }
  });
});
