/**
 * The few error classes a caller catches. Everything else is a built-in error for misuse.
 * @module
 */

/** A configuration value is missing or malformed. `main` prints the message and exits with code 2. */
export class ConfigError extends Error {
  override name = "ConfigError";

  /** `variable`: the environment variable at fault. */
  constructor(readonly variable: string, message: string) {
    super(message);
  }
}

/**
 * Why an LLM call failed, as far as the runtime can tell. `too_large`: the reply (streamed or whole) went
 * past the client's byte limit and was dropped; never retried.
 */
export type LlmErrorKind =
  | "timeout"
  | "network"
  | "http"
  | "invalid_response"
  | "too_large"
  | "aborted"
  | "script";

/**
 * A model call failed after the client's retries. The message names the cause (status, timeout, unreachable
 * host) and never contains the API key.
 */
export class LlmError extends Error {
  override name = "LlmError";
  readonly kind: LlmErrorKind;
  /** HTTP status, when the provider answered. */
  readonly status: number | null;
  /** How many retries were made before giving up. */
  readonly retries: number;

  constructor(
    message: string,
    options: { kind: LlmErrorKind; status?: number | null; retries?: number; cause?: unknown },
  ) {
    super(message, { cause: options.cause });
    this.kind = options.kind;
    this.status = options.status ?? null;
    this.retries = options.retries ?? 0;
  }
}

/** Why a session cannot do what was asked. */
export type SessionErrorReason =
  | "invalid_id"
  | "nothing_to_retry"
  | "approval_pending"
  | "no_pending_approval"
  | "invalid_decisions";

/**
 * A session or user id is malformed, a retry found no unanswered message, the session's last turn waits
 * for approval, or decisions do not match the calls of the turn that waits.
 */
export class SessionError extends Error {
  override name = "SessionError";

  constructor(message: string, readonly reason: SessionErrorReason) {
    super(message);
  }
}

/**
 * This process lost a session's lease while working on it: it could not renew it in time and another process
 * may have taken it. The work is aborted with this reason, so it takes back what it stored.
 */
export class LeaseLostError extends Error {
  override name = "LeaseLostError";

  constructor(readonly sessionId: string, options?: { cause?: unknown }) {
    super(`lost the lease of session "${sessionId}" to another process`, options);
  }
}

/**
 * A turn was cancelled on request (`POST /v1/sessions/{id}/cancel`, here or through the lease from another
 * process): its work is aborted with this reason, so it takes back what it stored, as any abort does.
 */
export class TurnCancelledError extends Error {
  override name = "TurnCancelledError";

  constructor(readonly sessionId: string, options?: { cause?: unknown }) {
    super(`the turn of session "${sessionId}" was cancelled`, options);
  }
}

/** A user has spent their daily tokens (AGENT_USER_DAILY_TOKENS): no turn starts until the next UTC day. */
export class QuotaExceededError extends Error {
  override name = "QuotaExceededError";

  /** `retryAfterSeconds`: whole seconds to the next UTC midnight, when the quota starts again. */
  constructor(message: string, readonly retryAfterSeconds: number) {
    super(message);
  }
}

/**
 * Work on a session cannot even wait its turn: the session already has as many works waiting as allowed
 * (`scope` `session`; HTTP answers 429) or the process as many sessions with works in line (`process`; 503).
 * Nothing was started; the same call may work after `retryAfterSeconds`.
 */
export class QueueFullError extends Error {
  override name = "QueueFullError";

  constructor(message: string, readonly scope: "session" | "process", readonly retryAfterSeconds: number) {
    super(message);
  }
}

/**
 * The session database cannot be reached (refused, closed, timed out, shutting down). The message names the
 * database without its password; the operation changed nothing, and the same call may work once it is back.
 */
export class StoreUnavailableError extends Error {
  override name = "StoreUnavailableError";
}

/** What an error says, without the "Error: " a stack would add; anything thrown that is not an error, as text. */
export function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * A client's `response_format` cannot be used: an unknown type, a schema that is not one, a bad name. The
 * HTTP routes answer it with a 400 naming `param`; the chat exits with its message.
 */
export class ResponseFormatError extends TypeError {
  override name = "ResponseFormatError";

  /** `param`: the request parameter at fault, e.g. `response_format.json_schema.schema`. */
  constructor(message: string, readonly param: string) {
    super(message);
  }
}
