/** How long the sandbox takes to answer, drawn per answer as real services vary: fixed, uniform, or long-tailed (lognormal). */
export type LatencySpec =
  | { kind: 'fixed'; ms: number }
  | { kind: 'uniform'; minMs: number; maxMs: number }
  /** exp(N(ln median, sigma)), capped at `maxMs` (a gateway's timeout). sigma 1: p99 about 10x the median. */
  | { kind: 'lognormal'; medianMs: number; sigma: number; maxMs: number };

export const fixedLatency = (ms: number): LatencySpec => ({ kind: 'fixed', ms });

/** A sampler of the distribution, driven by `random` (uniform in [0, 1)) so a run replays. */
export function latencySampler(spec: LatencySpec, random: () => number): () => number {
  switch (spec.kind) {
    case 'fixed':
      return () => spec.ms;
    case 'uniform':
      return () => spec.minMs + (spec.maxMs - spec.minMs) * random();
    case 'lognormal': {
      const mu = Math.log(spec.medianMs);
      return () => Math.min(spec.maxMs, Math.exp(mu + spec.sigma * standardNormal(random)));
    }
  }
}

/** Box-Muller: one standard normal draw from two uniform ones. */
function standardNormal(random: () => number): number {
  const u = 1 - random(); // (0, 1]: log(0) is not a number
  return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * random());
}

/** `--latency`: `200` (fixed), `100-300` (uniform), `lognormal:<median>[:<sigma>[:<max>]]` (sigma 1, max 60,000 by default); undefined otherwise. */
export function parseLatency(text: string): LatencySpec | undefined {
  const t = text.trim();
  const ms = (s: string | undefined, max = 60_000): number | undefined => {
    if (s === undefined || !/^\d+(\.\d+)?$/.test(s)) return undefined;
    const n = Number(s);
    return n <= max ? n : undefined;
  };
  if (/^\d+(\.\d+)?$/.test(t)) {
    const fixed = ms(t);
    return fixed === undefined ? undefined : fixedLatency(fixed);
  }
  const range = /^(\d+(?:\.\d+)?)-(\d+(?:\.\d+)?)$/.exec(t);
  if (range !== null) {
    const [minMs, maxMs] = [ms(range[1]), ms(range[2])];
    return minMs === undefined || maxMs === undefined || maxMs < minMs ? undefined : { kind: 'uniform', minMs, maxMs };
  }
  const tail = /^lognormal:([^:]+)(?::([^:]+))?(?::([^:]+))?$/.exec(t);
  if (tail !== null) {
    const medianMs = ms(tail[1]);
    const sigma = tail[2] === undefined ? 1 : ms(tail[2], 5);
    const maxMs = tail[3] === undefined ? 60_000 : ms(tail[3]);
    if (medianMs === undefined || medianMs <= 0 || sigma === undefined || maxMs === undefined) return undefined;
    return { kind: 'lognormal', medianMs, sigma, maxMs };
  }
  return undefined;
}

/** The spec as `--latency` takes it, for the sandbox's banner. */
export function describeLatency(spec: LatencySpec): string {
  if (spec.kind === 'fixed') return `latency ${spec.ms} ms`;
  if (spec.kind === 'uniform') return `latency ${spec.minMs}-${spec.maxMs} ms (uniform)`;
  return `latency lognormal, median ${spec.medianMs} ms, sigma ${spec.sigma}${spec.maxMs < 60_000 ? `, at most ${spec.maxMs} ms` : ''}`;
}
