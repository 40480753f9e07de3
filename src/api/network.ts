import { causeChain } from '../errors.js';

/** How a request failed to get an answer; the first four mean the request never left. */
export type ConnectionFailure = 'dns' | 'refused' | 'unreachable' | 'tls' | 'timeout' | 'reset' | 'aborted' | 'other';

/** Our own whole-request deadline, as the abort reason, so it is told apart from the caller's abort. */
export class DeadlineExceeded extends Error {
  override readonly name = 'DeadlineExceeded';
  constructor(readonly ms: number) {
    super(`no complete answer within ${formatSeconds(ms)}`);
  }
}

const formatSeconds = (ms: number): string => (ms >= 1000 ? `${Math.round(ms / 100) / 10} s` : `${ms} ms`);

const DNS = new Set(['ENOTFOUND', 'EAI_AGAIN', 'EAI_FAIL', 'EAI_NONAME', 'EAI_NODATA']);
const UNREACHABLE = new Set(['ENETUNREACH', 'EHOSTUNREACH', 'EHOSTDOWN', 'ENETDOWN', 'EADDRNOTAVAIL']);
const RESET = new Set(['ECONNRESET', 'EPIPE', 'ECONNABORTED', 'UND_ERR_SOCKET', 'UND_ERR_CLOSED']);
const TIMEOUTS: Record<string, string> = {
  UND_ERR_CONNECT_TIMEOUT: 'connect timed out',
  UND_ERR_HEADERS_TIMEOUT: 'no response headers in time',
  UND_ERR_BODY_TIMEOUT: 'the response body stalled',
  ETIMEDOUT: 'timed out',
};
/** OpenSSL's certificate verdicts, which Node passes through as the error code. */
const TLS_CODE = /^(ERR_TLS_|ERR_SSL_|EPROTO$|CERT_|UNABLE_TO_|DEPTH_ZERO_SELF_SIGNED_CERT$|SELF_SIGNED_CERT_IN_CHAIN$|HOSTNAME_MISMATCH$|ERR_OSSL_)/;

export interface Classified {
  failure: ConnectionFailure;
  text: string;
}

function classifyOne(e: unknown): Classified | null {
  if (e instanceof DeadlineExceeded) return { failure: 'timeout', text: e.message };
  if (!(e instanceof Error)) return null;
  const code = (e as NodeJS.ErrnoException).code ?? '';
  if (DNS.has(code)) return { failure: 'dns', text: 'DNS lookup failed' };
  if (code === 'ECONNREFUSED') return { failure: 'refused', text: 'connection refused' };
  if (UNREACHABLE.has(code)) return { failure: 'unreachable', text: 'network unreachable' };
  if (TLS_CODE.test(code)) return { failure: 'tls', text: `TLS failed (${code})` };
  const timeout = TIMEOUTS[code];
  if (timeout !== undefined) return { failure: 'timeout', text: timeout };
  if (RESET.has(code)) return { failure: 'reset', text: 'the connection was reset' };
  if (code === 'UND_ERR_ABORTED' || e.name === 'AbortError') return { failure: 'aborted', text: 'aborted' };
  return null;
}

/** What kind of failure a transport error is, with a few words that say it; never the request. */
export function classifyConnectionFailure(error: unknown): Classified {
  // undici and fetch wrap the system error.
  for (const e of causeChain(error)) {
    const found = classifyOne(e);
    if (found !== null) return found;
  }
  const code = error instanceof Error ? (error as NodeJS.ErrnoException).code : undefined;
  return { failure: 'other', text: code ?? (error instanceof Error ? error.message : String(error)) };
}
