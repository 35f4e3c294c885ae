/**
 * The one HTTP error type, and the one place a thrown value becomes an error response:
 * `{"error": {"code": "payload_too_large", "message": "Cannot read request body: …"}}`.
 * @module
 */
import {
  QueueFullError,
  QuotaExceededError,
  SessionError,
  StoreUnavailableError,
  TurnCancelledError,
} from "../errors.ts";
import { failureMessage } from "../session/failure.ts";
import type { TurnResult } from "../types.ts";

/** Options of {@linkcode HttpError}. */
export interface HttpErrorOptions {
  /** Extra response headers, such as `Retry-After`. @default {{}} */
  headers?: Record<string, string>;
  /** Extra fields of the body's `error` object, such as `run_id`. @default {{}} */
  details?: Record<string, unknown>;
  /** The underlying error, for logs; never sent. @default {undefined} */
  cause?: unknown;
}

/** A failure the client caused or must react to. The message is sent as is, so it never holds a secret. */
export class HttpError extends Error {
  override name = "HttpError";
  /** HTTP status, 400–599. */
  readonly status: number;
  /** Stable snake_case code a client can branch on, like `"payload_too_large"`. */
  readonly code: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly details: Readonly<Record<string, unknown>>;

  /** @throws {RangeError} when `status` is not an integer in 400–599. */
  constructor(status: number, code: string, message: string, options: HttpErrorOptions = {}) {
    const { headers = {}, details = {}, cause } = options;
    if (!Number.isInteger(status) || status < 400 || status > 599) {
      throw new RangeError(`Cannot create HttpError: status must be an integer in 400-599, got ${status}`);
    }
    super(message, cause === undefined ? undefined : { cause });
    this.status = status;
    this.code = code;
    this.headers = Object.freeze({ ...headers });
    this.details = Object.freeze({ ...details });
  }

  /** The body's `error` object: code, message and details. */
  body(): Record<string, unknown> {
    return { code: this.code, message: this.message, ...this.details };
  }

  /**
   * The response: status, headers and `body` as JSON (`charset=utf-8` unless a header sets JSON already);
   * the body is `{"error": body()}` unless a route writes errors in another shape.
   */
  response(body: unknown = { error: this.body() }): Response {
    const headers = new Headers(this.headers);
    if (!/^application\/json\b/.test(headers.get("content-type") ?? "")) {
      headers.set("content-type", "application/json; charset=utf-8");
    }
    return new Response(JSON.stringify(body), { status: this.status, headers });
  }
}

/** The 503 of every request, and of every turn still queued, once the server is shutting down. */
export function shuttingDown(options?: HttpErrorOptions): HttpError {
  return new HttpError(
    503,
    "shutting_down",
    "The server is shutting down; retry elsewhere or later",
    options,
  );
}

/** The 503 of a request the session database could not serve; the message names it without its password. */
export function storeUnavailable(message: string, options?: HttpErrorOptions): HttpError {
  return new HttpError(503, "store_unavailable", message, { headers: { "retry-after": "5" }, ...options });
}

/**
 * Any thrown value as the `HttpError` to answer with: itself; a `SessionError` as 400 (409 with nothing to
 * retry or an approval pending or none; decisions that do not match as `invalid_body`); a full session queue as 429 (`too_many_requests`), a full process queue as
 * 503 (`server_busy`), both with `Retry-After`; an unreachable session database as 503 (`store_unavailable`);
 * an `AbortError` as 499 (the client is gone); anything else, logged, as a 500 saying `internal`.
 */
export function toHttpError(
  error: unknown,
  log: (line: string) => void,
  internal = "Internal server error",
): HttpError {
  if (error instanceof HttpError) return error;
  if (error instanceof SessionError) {
    if (error.reason === "approval_pending" || error.reason === "no_pending_approval") {
      return new HttpError(409, error.reason, error.message);
    }
    if (error.reason === "invalid_decisions") return new HttpError(400, "invalid_body", error.message);
    const retry = error.reason === "nothing_to_retry";
    return new HttpError(retry ? 409 : 400, retry ? "nothing_to_retry" : "invalid_session_id", error.message);
  }
  if (error instanceof QuotaExceededError) {
    const headers = { "Retry-After": String(error.retryAfterSeconds) };
    return new HttpError(429, "quota_exceeded", error.message, { headers });
  }
  if (error instanceof QueueFullError) {
    const [status, code] = error.scope === "session" ? [429, "too_many_requests"] : [503, "server_busy"];
    const headers = { "Retry-After": String(error.retryAfterSeconds) };
    return new HttpError(status, code, error.message, { headers });
  }
  if (error instanceof StoreUnavailableError) return storeUnavailable(error.message);
  if (error instanceof DOMException && error.name === "AbortError") return clientClosed();
  log(`error: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
  return new HttpError(500, "internal", internal);
}

/** The 499 of a request whose client went away: logged, never read. */
export function clientClosed(): HttpError {
  return new HttpError(499, "client_closed_request", "The client closed the request");
}

/**
 * The one mapping from a turn that ended without an answer (`result.failure` set) to the error every API
 * answers it with, JSON or stream alike:
 * - `timeout`: 504 `llm_timeout`; any other model failure: 502 `llm_error` (both plain `application/json`)
 * - `store`: 503 `store_unavailable` with `Retry-After`
 * - `lease`: 503 `session_lease_lost` with `Retry-After: 1` (nothing of the turn was kept)
 * - `aborted`: its abort reason when that is an `HttpError` (the shutdown's 503); 409 `turn_cancelled` when it was
 *   cancelled on request; else 499 (the client left)
 * - `invalid_output`: 502 `invalid_output` with the answer's `errors` (the model answered, but not in the
 *   response format asked for, even after a repair request; the turn is stored, there is nothing to retry)
 * - `deadline` (outcome `timeout`): 504 `turn_timeout` (nothing of the turn was kept)
 *
 * The words are the session layer's ({@linkcode failureMessage}), with this API's routes to retry and cancel;
 * `message` words a model or store failure instead (each API gives its own advice). The body carries the
 * run id.
 */
export function failedTurn(result: TurnResult, message?: string): HttpError {
  const { failure, runId, sessionId } = result;
  if (failure === undefined) {
    throw new TypeError(
      `Cannot map turn ${runId} to an error: it ended ${result.outcome}, without a failure`,
    );
  }
  const advice = {
    retry: `retry it with POST /v1/sessions/${sessionId}/retry`,
    cancel: `POST /v1/sessions/${sessionId}/cancel`,
  };
  const why = failureMessage({ ...result, failure }, advice);
  const details = { run_id: runId };
  const { kind, cause } = failure;
  if (kind === "aborted" && cause instanceof TurnCancelledError) {
    return new HttpError(409, "turn_cancelled", why, { details });
  }
  if (kind === "aborted") return cause instanceof HttpError ? cause : clientClosed();
  if (kind === "lease") {
    return new HttpError(503, "session_lease_lost", why, { details, headers: { "Retry-After": "1" } });
  }
  if (kind === "store") return storeUnavailable(message ?? why, { details });
  if (kind === "invalid_output") {
    return new HttpError(502, "invalid_output", why, {
      details: { ...details, errors: failure.errors ?? [] },
    });
  }
  if (kind === "deadline") return new HttpError(504, "turn_timeout", why, { details });
  const [status, code] = kind === "timeout" ? [504, "llm_timeout"] : [502, "llm_error"];
  return new HttpError(status, code, message ?? why, {
    details,
    headers: { "content-type": "application/json" },
  });
}
