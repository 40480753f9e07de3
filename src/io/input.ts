import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { InputError } from '../errors.js';

export interface InputSource {
  /** A seekable file: the input itself, or stdin spooled to a private temp file. */
  path: string;
  /** How messages name it: the path as given, or "stdin". */
  displayName: string;
  fromStdin: boolean;
  bytes: number;
  cleanup(): Promise<void>;
}

/**
 * The batch reads its input twice (scan, then write results in input order), so stdin is first
 * spooled to a file readable only by the owner. A 1M-row input stays on disk, not in memory.
 */
export async function resolveInput(spec: string, stdin: NodeJS.ReadableStream): Promise<InputSource> {
  if (spec === '-') {
    const dir = await mkdtemp(join(tmpdir(), 'enrich-stdin-'));
    const path = join(dir, 'input.csv');
    await pipeline(stdin, createWriteStream(path, { mode: 0o600 }));
    const { size } = await stat(path);
    return { path, displayName: 'stdin', fromStdin: true, bytes: size, cleanup: () => rm(dir, { recursive: true, force: true }) };
  }
  let info;
  try {
    info = await stat(spec);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new InputError(code === 'ENOENT' ? `no such file: ${spec}` : `cannot read ${spec}: ${code ?? String(error)}`, { cause: error });
  }
  if (info.isDirectory()) throw new InputError(`${spec} is a directory, not a CSV file`);
  return { path: spec, displayName: spec, fromStdin: false, bytes: info.size, cleanup: async () => {} };
}

/** The input's identity: sha256 of its bytes (hundreds of MB a second; no parsing). */
export async function hashFile(path: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(path, { highWaterMark: 1024 * 1024 }) as AsyncIterable<Buffer>) hash.update(chunk);
  return hash.digest('hex');
}
