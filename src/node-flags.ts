/**
 * The flags this Node was started with: its command line's and NODE_OPTIONS'. A flag given there
 * is the user's choice (heap.ts leaves it alone), and V8 refuses a code cache made under other
 * flags (cli/code-cache.ts names its file for them).
 */
export function startFlags(env: NodeJS.ProcessEnv = process.env): string {
  return `${process.execArgv.join(' ')}\n${env['NODE_OPTIONS'] ?? ''}`;
}
