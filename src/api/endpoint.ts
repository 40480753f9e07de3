import { API_PREFIX } from './types.js';

/** A stable identity for a service, the base URL's origin and prefix (never the key). */
export function serviceIdentity(baseUrl: string): string {
  const { origin, prefix } = serviceEndpoint(baseUrl);
  return `${origin}${prefix}`;
}

/** `https://host[:port][/prefix]` -> origin and the path prefix the endpoints live under. */
export function serviceEndpoint(baseUrl: string): { origin: string; prefix: string } {
  const url = new URL(baseUrl);
  let path = url.pathname.replace(/\/+$/, '');
  if (!path.endsWith(API_PREFIX)) path = `${path}${API_PREFIX}`;
  return { origin: url.origin, prefix: path };
}
