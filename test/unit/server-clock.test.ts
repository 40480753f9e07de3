import { afterEach, expect, it, vi } from 'vitest';
import { ServerClock } from '../../src/store/postgres/server-clock.js';

afterEach(() => vi.useRealTimers());

it("keeps the server's time from the fastest round trip, or a later one after a clock step", () => {
  vi.useFakeTimers({ now: 1_000_000 });
  const clock = new ServerClock();
  // The server is 5 s ahead: read over 40 ms, then over 4 ms.
  clock.observe(1_000_000 + 5_000 + 20, 1_000_000, 1_000_040);
  expect(clock.now()).toBe(1_005_000);
  clock.observe(1_000_100 + 5_000 + 2, 1_000_100, 1_000_104);
  expect(clock.now()).toBe(1_005_000);
  // A slower reading 300 ms off is noise within its round trip and a second: kept as it was.
  clock.observe(1_000_200 + 5_300, 1_000_000, 1_000_400);
  expect(clock.now()).toBe(1_005_000);
  // The host's clock stepped an hour forward (NTP): the next heartbeat's reading says so.
  vi.setSystemTime(1_000_000 + 3_600_000);
  clock.observe(1_000_000 + 5_000 + 10, 1_000_000 + 3_600_000, 1_000_000 + 3_600_020);
  expect(clock.now()).toBe(1_005_000);
});
