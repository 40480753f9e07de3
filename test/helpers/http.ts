import { request } from 'undici';

export interface Reply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  json: Record<string, unknown>;
}

/** One request to a sandbox, answered as status, headers and parsed JSON. */
export async function call(
  baseUrl: string,
  method: 'GET' | 'POST' | 'PUT' | 'DELETE',
  path: string,
  options: { key?: string | null; body?: unknown; rawBody?: string; headers?: Record<string, string> } = {},
): Promise<Reply> {
  const headers: Record<string, string> = { ...options.headers };
  if (options.key != null) headers['authorization'] = `Bearer ${options.key}`;
  let body: string | undefined = options.rawBody;
  if (options.body !== undefined) {
    body = JSON.stringify(options.body);
    headers['content-type'] = 'application/json';
  }
  const res = await request(`${baseUrl}${path}`, { method, headers, body: body ?? null });
  const text = await res.body.text();
  let json: Record<string, unknown> = {};
  try {
    json = JSON.parse(text) as Record<string, unknown>;
  } catch {
    // not JSON; tests that care look at text
  }
  return { status: res.statusCode, headers: res.headers, text, json };
}

export const MATCH = '/api/v1/public/company/match';
export const ENRICH = '/api/v1/public/company/enrich';
