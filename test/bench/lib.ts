import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Pool } from 'undici';

export const BIN = fileURLToPath(new URL('../../bin/enrich.cjs', import.meta.url));
const CLK_TCK = 100;

/** User + system CPU seconds a process has used so far (Linux /proc). */
export function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
}

/** Peak resident set (VmHWM) of a live process, MiB. */
export function peakRssMiB(pid: number): number {
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m === null ? 0 : Number(m[1]) / 1024;
}

export interface Server {
  url: string;
  child: ChildProcess;
  stop(): Promise<void>;
}

const children = new Set<ChildProcess>();
// A bench that dies must not leave servers behind holding ports (and the terminal's pipes).
process.on('exit', () => {
  for (const child of children) child.kill('SIGKILL');
});

/** Starts `node <args>` and waits for it to print its address (an http:// URL, unless `address` says otherwise). */
export async function startServer(args: string[], address = /(http:\/\/127\.0\.0\.1:\d+)/): Promise<Server> {
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'ignore'] });
  children.add(child);
  child.on('exit', () => children.delete(child));
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout?.on('data', (c: Buffer) => {
      out += c.toString();
      const m = address.exec(out);
      if (m !== null) resolve(m[1] as string);
    });
    child.on('exit', (code) => reject(new Error(`server exited ${code}: ${out}`)));
  });
  return {
    url,
    child,
    stop: () =>
      new Promise((resolve) => {
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
}

export const sandboxServer = (extra: string[] = []): Promise<Server> =>
  startServer([BIN, 'sandbox', '--port', '0', '--key', 'sk_bench', '--balance', '1000000000', ...extra]);

/** A node:http server answering a fixed JSON body: the floor any Node server sits on. */
export const plainServer = (): Promise<Server> =>
  startServer([
    '-e',
    `const s=require('node:http').createServer({keepAlive:true},(q,r)=>{q.resume();r.writeHead(200,{'content-type':'application/json'});r.end('{"matched":false,"credits_charged":0,"company":null}')});s.keepAliveTimeout=30000;s.listen(0,'127.0.0.1',()=>console.log('http://127.0.0.1:'+s.address().port));process.on('SIGTERM',()=>process.exit(0));`,
  ]);

export interface LoadResult {
  requests: number;
  ok: number;
  seconds: number;
  perSecond: number;
  serverCpuMsPerRequest: number;
  p50ms: number;
  p99ms: number;
}

/** Drives `inFlight` keep-alive requests at once for `seconds`, counting answers and server CPU. */
export async function load(
  server: Server,
  path: (i: number) => string,
  options: { seconds: number; inFlight: number; headers?: Record<string, string>; post?: (i: number) => { body: string; headers: Record<string, string> } },
): Promise<LoadResult> {
  const pool = new Pool(server.url, { connections: options.inFlight, pipelining: 1, keepAliveTimeout: 30_000 });
  const latencies: number[] = [];
  let requests = 0;
  let ok = 0;
  let i = 0;
  // Warm the connections and the JIT before measuring.
  const warmUntil = performance.now() + 500;
  const worker = async (measure: () => boolean, until: number): Promise<void> => {
    while (performance.now() < until) {
      const t0 = performance.now();
      const n = i++;
      const post = options.post?.(n);
      const res = await pool.request(
        post === undefined
          ? { method: 'GET', path: path(n), headers: options.headers ?? {} }
          : { method: 'POST', path: path(n), headers: { ...options.headers, ...post.headers }, body: post.body },
      );
      await res.body.dump();
      if (measure()) {
        requests++;
        if (res.statusCode === 200) ok++;
        latencies.push(performance.now() - t0);
      }
    }
  };
  await Promise.all(Array.from({ length: options.inFlight }, () => worker(() => false, warmUntil)));
  const pid = server.child.pid as number;
  const cpu0 = cpuSeconds(pid);
  const t0 = performance.now();
  const until = t0 + options.seconds * 1000;
  await Promise.all(Array.from({ length: options.inFlight }, () => worker(() => true, until)));
  const seconds = (performance.now() - t0) / 1000;
  const cpu = cpuSeconds(pid) - cpu0;
  await pool.close();
  latencies.sort((a, b) => a - b);
  return {
    requests,
    ok,
    seconds,
    perSecond: requests / seconds,
    serverCpuMsPerRequest: (cpu * 1000) / requests,
    p50ms: latencies[Math.floor(latencies.length * 0.5)] ?? Number.NaN,
    p99ms: latencies[Math.floor(latencies.length * 0.99)] ?? Number.NaN,
  };
}

export const fmt = (n: number, digits = 0): string => n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });

export interface Measured {
  code: number;
  wallMs: number;
  peakMiB: number;
  stderr: string;
}

/**
 * Runs a command to completion, timing it from spawn to exit and tracking its peak resident set
 * (VmHWM, polled; the high-water mark only grows, so the last poll is within a poll of the peak).
 */
export function runMeasured(command: string, args: string[], env: Record<string, string>): Promise<Measured> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const child = spawn(command, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr?.on('data', (c: Buffer) => (stderr += c.toString()));
    let peak = 0;
    const poll = setInterval(() => {
      try {
        peak = Math.max(peak, peakRssMiB(child.pid as number));
      } catch {
        // exited between polls
      }
    }, 10);
    child.on('error', reject);
    child.on('exit', (code) => {
      clearInterval(poll);
      resolve({ code: code ?? -1, wallMs: performance.now() - t0, peakMiB: peak, stderr });
    });
  });
}

export const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2;
};

export interface SandboxStats {
  requests: number;
  byStatus: Record<string, number>;
  firstAt: number;
  lastAt: number;
}

export async function sandboxStats(server: Server, key = 'sk_bench'): Promise<SandboxStats> {
  const res = await fetch(`${server.url}/_sandbox/stats`, { headers: { authorization: `Bearer ${key}` } });
  return (await res.json()) as SandboxStats;
}
