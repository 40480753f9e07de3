/** Problem documents (RFC 9457) as the service sends them: spec 2.5 and 7. */

export const PROBLEM_TITLES: Readonly<Record<string, string>> = {
  invalid_token: 'Missing or invalid API key',
  insufficient_scope: 'The API key lacks the required scope',
  insufficient_credits: 'Not enough credits for this call',
  validation_error: 'The request could not be validated',
  rate_limited: 'Too many requests for this key',
  internal: 'Internal error',
  not_found: 'No such endpoint',
  method_not_allowed: 'Method not allowed on this endpoint',
  not_callable: 'This endpoint is planned and not callable yet',
};

export interface ProblemResponse {
  status: number;
  body: string;
  headers?: Record<string, string>;
}

export function problem(
  typeBase: string,
  status: number,
  code: string,
  requestId: string,
  detail?: string,
  extra?: Record<string, number | string>,
): ProblemResponse {
  const doc: Record<string, unknown> = {
    type: `${typeBase}/${code}`,
    title: PROBLEM_TITLES[code] ?? code,
    status,
    code,
  };
  if (detail !== undefined) doc['detail'] = detail;
  doc['requestId'] = requestId;
  if (extra !== undefined) Object.assign(doc, extra);
  return { status, body: JSON.stringify(doc) };
}
