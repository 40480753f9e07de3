/** Edits (insert, delete, substitute, swap two neighbours) between two short words. */
export function editDistance(a: string, b: string): number {
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) => Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  const at = (i: number, j: number): number => d[i]?.[j] ?? Number.POSITIVE_INFINITY;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let best = Math.min(at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) best = Math.min(best, at(i - 2, j - 2) + 1);
      (d[i] as number[])[j] = best;
    }
  }
  return at(a.length, b.length);
}

/** The subcommand a mistyped input most likely meant (`enrich sandox`), or null; only for a bare word (a path or an extension is a file name). */
export function suggestCommand(input: string, commands: readonly string[]): string | null {
  if (!/^[a-z][a-z-]*$/i.test(input)) return null;
  const word = input.toLowerCase();
  let best: { name: string; distance: number } | null = null;
  for (const name of commands) {
    const distance = editDistance(word, name);
    if (distance <= Math.max(1, Math.floor(name.length / 3)) && (best === null || distance < best.distance)) best = { name, distance };
  }
  return best?.name ?? null;
}
