/**
 * The one HTTP error type and the JSON error body every route answers with:
 * `{"error": {"code": "payload_too_large", "message": "Cannot read request body: …"}}`.
 * @module
 */

/** Options of {@linkcode HttpError}. */
export interface HttpErrorOptions {
  /**
   * Extra response headers, such as `Retry-After` or `WWW-Authenticate`.
   * @default {{}}
   */
  headers?: Record<string, string>;
  /**
   * The underlying error, kept for logs and never sent to the client.
   * @default {undefined}
   */
  cause?: unknown;
}

/**
 * A failure the client caused or must react to, with the status, a snake_case `code` and headers to answer
 * with. The message is sent to the client as is, so it must never contain a secret. Anything thrown that is
 * not an `HttpError` is a 500 that is logged, never leaked.
 */
export class HttpError extends Error {
  override name = "HttpError";
  /** HTTP status, 400–599. */
  readonly status: number;
  /** Stable snake_case code a client can branch on, like `"payload_too_large"`. */
  readonly code: string;
  /** Extra response headers (frozen). */
  readonly headers: Readonly<Record<string, string>>;

  /** @throws {RangeError} when `status` is not an integer in 400–599. */
  constructor(status: number, code: string, message: string, options: HttpErrorOptions = {}) {
    const { headers = {}, cause } = options;
    if (!Number.isInteger(status) || status < 400 || status > 599) {
      throw new RangeError(`Cannot create HttpError: status must be an integer in 400-599, got ${status}`);
    }
    super(message, cause === undefined ? undefined : { cause });
    this.status = status;
    this.code = code;
    this.headers = Object.freeze({ ...headers });
  }
}

/**
 * A JSON error response `{"error": {"code", "message"}}` with `content-type: application/json; charset=utf-8`
 * and the given extra headers. Never throws for a valid status.
 */
export function errorResponse(
  status: number,
  code: string,
  message: string,
  headers?: HeadersInit,
): Response {
  const responseHeaders = new Headers(headers);
  responseHeaders.set("content-type", "application/json; charset=utf-8");
  return new Response(JSON.stringify({ error: { code, message } }), { status, headers: responseHeaders });
}

/** The response for an {@linkcode HttpError}: its status, code, message and headers. */
export function httpErrorResponse(error: HttpError): Response {
  return errorResponse(error.status, error.code, error.message, error.headers);
}
