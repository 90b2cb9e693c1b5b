// The only way the front end talks to gpumarket: the public GraphQL API at
// /graphql, with the user's JWT as a bearer token.
import type { TypedDocumentString } from './gql/graphql';

const TOKEN_KEY = 'gpumarket.token';

/**
 * Dispatched on `window` when the API answers UNAUTHENTICATED to a request
 * that carried a token (the JWT expired or was revoked): the session hooks
 * drop the session and show the log-in form, keeping the forms' drafts.
 */
export const SESSION_EXPIRED_EVENT = 'gpumarket:session-expired';

export function getToken(): string | null {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(token: string | null): void {
  if (token === null) sessionStorage.removeItem(TOKEN_KEY);
  else sessionStorage.setItem(TOKEN_KEY, token);
}

/** One GraphQL error as the API reports it. */
export interface ApiErrorDetail {
  message: string;
  code: string;
  /** The input field a VALIDATION error names (`field: message`), if any. */
  field: string | null;
}

export class ApiError extends Error {
  readonly errors: ApiErrorDetail[];

  constructor(errors: ApiErrorDetail[]) {
    super(errors.map((e) => `${e.code}: ${e.message}`).join('; '));
    this.errors = errors;
  }

  /** The errors that name `field`, for showing next to its input. */
  forField(field: string): ApiErrorDetail | undefined {
    return this.errors.find((e) => e.field === field);
  }

  get code(): string {
    return this.errors[0]?.code ?? 'INTERNAL';
  }
}

interface RawError {
  message?: string;
  extensions?: { code?: string; field?: string; fieldErrors?: { field?: string; message?: string }[] };
}

/**
 * One API error as the details the forms show: a VALIDATION error that lists
 * several invalid fields (`extensions.fieldErrors`) becomes one detail per
 * field, so every input it names is marked at once.
 */
function details(raw: RawError): ApiErrorDetail[] {
  const message = raw.message ?? 'unknown error';
  const code = raw.extensions?.code ?? 'INTERNAL';
  const fieldErrors = raw.extensions?.fieldErrors;
  if (code === 'VALIDATION' && Array.isArray(fieldErrors) && fieldErrors.length > 0) {
    return fieldErrors.map((e) => ({
      message: `${e.field ?? 'input'}: ${e.message ?? 'invalid'}`,
      code,
      field: e.field ?? null,
    }));
  }
  let field = raw.extensions?.field ?? null;
  if (field === null && code === 'VALIDATION') {
    // The gateway writes validation errors as `<field>: <message>`.
    const m = /^([A-Za-z][A-Za-z0-9_.]*): /.exec(message);
    if (m) field = m[1].split('.').pop() ?? null;
  }
  return [{ message, code, field }];
}

export async function request<TResult, TVariables>(
  document: TypedDocumentString<TResult, TVariables>,
  ...[variables]: TVariables extends Record<string, never> ? [] : [TVariables]
): Promise<TResult> {
  const headers: Record<string, string> = {
    'Content-Type': 'application/json',
    Accept: 'application/json',
  };
  const token = getToken();
  if (token) headers.Authorization = `Bearer ${token}`;
  let response: Response;
  try {
    response = await fetch('/graphql', {
      method: 'POST',
      headers,
      body: JSON.stringify({ query: document.toString(), variables: variables ?? {} }),
    });
  } catch (e) {
    throw new ApiError([{ message: `cannot reach the API: ${String(e)}`, code: 'UNAVAILABLE', field: null }]);
  }
  let body: { data?: TResult | null; errors?: RawError[] };
  try {
    body = await response.json();
  } catch {
    throw new ApiError([
      { message: `the API answered HTTP ${response.status} without JSON`, code: 'UNAVAILABLE', field: null },
    ]);
  }
  if (body.errors && body.errors.length > 0) {
    const errors = body.errors.flatMap(details);
    if (token && errors.some((e) => e.code === 'UNAUTHENTICATED')) {
      // Only if the token is still the one sent (not a newer log-in).
      if (getToken() === token) {
        setToken(null);
        window.dispatchEvent(new Event(SESSION_EXPIRED_EVENT));
      }
    }
    throw new ApiError(errors);
  }
  if (!body.data) {
    throw new ApiError([{ message: `HTTP ${response.status} with no data`, code: 'INTERNAL', field: null }]);
  }
  return body.data;
}

/**
 * An enum value of the API as its wire name, the lower-case text the pages
 * show (`HOST_LOST` is `host_lost`).
 */
export function wireName(value: string): string {
  return value.toLowerCase();
}

/**
 * A line's or interval's meter (`meterKind`) as the pages show it: the wire
 * name (`gpu`, `bandwidth_up`), or `unknown` for usage posted before
 * postings carried their meter (the API gives null there).
 */
export function meterName(meter: string | null | undefined): string {
  return meter ? wireName(meter) : 'unknown';
}

export function errorText(e: unknown): string {
  if (e instanceof ApiError) return e.errors.map((x) => `${x.message} (${x.code})`).join('; ');
  return String(e);
}
