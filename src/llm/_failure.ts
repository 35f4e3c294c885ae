/**
 * What went wrong in one attempt of the fetch client, named by pure functions; the retry loop decides what a
 * failure means.
 * @module
 */
import { LlmError, type LlmErrorKind } from "../errors.ts";
import type { ReasoningEffort } from "../types.ts";
import type { Dialect } from "./dialect.ts";
import { parseRetryAfter, providerErrorMessage, quoteBody } from "./wire.ts";

/** What every attempt of one client shares: where and how it posts, what its failures name. */
export interface AttemptContext {
  /** The base URL and the dialect's path: `{baseUrl}/chat/completions`. */
  url: string;
  /** The wire format: headers, body, how a reply reads. */
  dialect: Dialect;
  /** Named in messages instead of the URL, whose path may be private. */
  host: string;
  model: string;
  /** Who answers (see `modelOrigin`): the provider state a reply keeps is tagged with it. */
  origin: string;
  apiKey: string;
  /** Sent as `reasoning_effort` with every request, unless null. */
  reasoningEffort: ReasoningEffort | null;
  stream: boolean;
  timeoutSeconds: number;
  idleTimeoutSeconds: number;
  maxReplyBytes: number;
  fetch: typeof globalThis.fetch;
  now: () => number;
}

/** One failed attempt, classified. Its message may hold the key: the client redacts what it shows. */
export interface Failure {
  kind: LlmErrorKind;
  message: string;
  status: number | null;
  retryable: boolean;
  /** The provider's `Retry-After` in ms, which replaces the backoff for this retry. */
  retryAfterMs: number | null;
}

/** Where an attempt was when `error` was thrown. */
export interface Thrown {
  error: unknown;
  /** The caller's signal aborted. */
  aborted: boolean;
  /** Which deadline passed: the whole attempt's, or the longest silence of a stream. */
  passed: "whole" | "idle" | null;
  /** A whole body that broke mid-read: the status the host had answered. */
  status?: number;
  /** Stream bytes already read: after any, nothing is retried, since the caller may have shown the text. */
  bytes?: number;
}

function failure(
  kind: LlmErrorKind,
  message: string,
  retryable: boolean,
  status: number | null = null,
): Failure {
  return { kind, message, status, retryable, retryAfterMs: null };
}

/** The failure of an aborted call. */
export const ABORTED: Failure = Object.freeze(failure("aborted", "LLM request was aborted", false));

/** The messages of an error and its causes, with URLs cut to their host (no path, no query). */
export function describeThrown(error: unknown): string {
  const parts: string[] = [];
  let current: unknown = error;
  for (let depth = 0; current !== undefined && current !== null && depth < 4; depth++) {
    const text = current instanceof Error ? current.message : String(current);
    if (text !== "" && !parts.includes(text)) parts.push(text);
    current = current instanceof Error ? current.cause : undefined;
  }
  return parts.join(": ").replace(/https?:\/\/[^\s)]+/g, (url) => URL.parse(url)?.host ?? "[url]");
}

/**
 * Why a connection could not even be made, in a few words, when waiting cannot change it: nothing listens on
 * the port, the name does not resolve, or Deno refuses the port. Null for anything else (a reset, a TLS
 * failure, a timeout), which may pass.
 */
export function connectCause(error: unknown): string | null {
  const text = describeThrown(error);
  if (/connection refused|ECONNREFUSED/i.test(text)) return "connection refused";
  if (/dns error|failed to lookup address|name or service not known|ENOTFOUND/i.test(text)) {
    return "the host name does not resolve (DNS)";
  }
  if (/requests to port \d+ are blocked/i.test(text)) return "Deno blocks requests to that port";
  return null;
}

/** Names a throw: an abort, a deadline, the network (only fetch's `TypeError` is worth another attempt). */
export function classify(thrown: Thrown, context: AttemptContext): Failure {
  const { error, aborted, passed, status, bytes = 0 } = thrown;
  const { host, timeoutSeconds, idleTimeoutSeconds } = context;
  if (aborted) return ABORTED;
  const stream = `LLM stream from ${host}`;
  if (bytes > 0 && passed === "whole") {
    const message =
      `${stream} ran past the ${timeoutSeconds} s deadline of the whole call after ${bytes} bytes`;
    return failure("timeout", message, false);
  }
  if (bytes > 0 && passed === "idle") {
    const message = `${stream} stalled: no data for ${idleTimeoutSeconds} s after ${bytes} bytes`;
    return failure("timeout", message, false);
  }
  if (bytes > 0) {
    return failure("network", `${stream} broke after ${bytes} bytes: ${describeThrown(error)}`, false);
  }
  if (passed !== null) return failure("timeout", `LLM request timed out after ${timeoutSeconds} s`, true);
  // Nothing will change in the backoff's second or two: said at once, with the address to check.
  const cause = status === undefined ? connectCause(error) : null;
  if (cause !== null) {
    return failure("network", `cannot connect to ${new URL(context.url).origin}: ${cause}`, false);
  }
  const message = status === undefined
    ? `LLM host ${host} is unreachable: ${describeThrown(error)}`
    : `LLM response from ${host} broke mid-body (HTTP ${status}): ${describeThrown(error)}`;
  return failure("network", message, error instanceof TypeError);
}

/**
 * A non-2xx answer, with the provider's own message when it sent one, and its `Retry-After`; a refused
 * `reasoning_effort` also says which setting sent it.
 */
export function httpFailure(response: Response, text: string, context: AttemptContext): Failure {
  const { status } = response;
  let detail: string | null = null;
  try {
    detail = providerErrorMessage(JSON.parse(text));
  } catch {
    // Not JSON (an HTML error page, a proxy's text): the text itself is quoted.
  }
  detail = quoteBody(detail ?? text) || response.statusText;
  let said = detail === "" ? "" : `: ${detail}`;
  // A 400 whose body names the field (xAI spells it `reasoningEffort`) refuses the `reasoning_effort` sent.
  // The body is read, not only the quoted message, since some put the field's name in `param` alone.
  if (status === 400 && context.reasoningEffort !== null && /reasoning[_ ]?effort/i.test(text)) {
    said += ` (the provider rejected reasoning_effort "${context.reasoningEffort}": ` +
      "unset AGENT_REASONING_EFFORT for this model)";
  }
  const retryable = isRetryableStatus(status);
  const result = failure(
    "http",
    `LLM request failed: HTTP ${status} from ${context.host}${said}`,
    retryable,
    status,
  );
  if (retryable) {
    const now = context.now();
    result.retryAfterMs = parseRetryAfter(response.headers.get("retry-after"), now) ??
      rateLimitReset(response.headers, now);
  }
  return result;
}

/**
 * Without a `Retry-After`, the wait Anthropic's rate-limit headers imply: until the latest
 * `anthropic-ratelimit-*-reset` (an RFC 3339 time) of a limit whose `-remaining` is 0; null when none is spent.
 */
export function rateLimitReset(headers: Headers, nowMs: number): number | null {
  let until: number | null = null;
  for (const [name, value] of headers) {
    const limit = /^anthropic-ratelimit-(.+)-remaining$/.exec(name)?.[1];
    if (limit === undefined || value.trim() !== "0") continue;
    const reset = Date.parse(headers.get(`anthropic-ratelimit-${limit}-reset`) ?? "");
    if (!Number.isNaN(reset)) until = Math.max(until ?? reset, reset);
  }
  return until === null ? null : Math.max(0, until - nowMs);
}

/** A reply past the byte limit; never retried, as the next answer would be as long. */
export function tooLarge({ host, maxReplyBytes }: AttemptContext): Failure {
  const message = `LLM reply from ${host} is too large: it went past the limit of ${maxReplyBytes} bytes`;
  return failure("too_large", message, false);
}

/**
 * An `LlmError` from parsing becomes an `invalid_response` failure, or an `http` one for a provider's error
 * event with its status (retried when `retryable`, as that status would be); anything else is a bug, rethrown.
 */
export function invalid(error: unknown, retryable = false): Failure {
  if (!(error instanceof LlmError)) throw error;
  if (error.kind === "http" && error.status !== null) {
    return failure("http", error.message, retryable && isRetryableStatus(error.status), error.status);
  }
  return failure("invalid_response", error.message, false);
}

/** Statuses worth another attempt: a timeout, a conflict, a rate limit, a server error (529: overloaded). */
function isRetryableStatus(status: number): boolean {
  return status === 408 || status === 409 || status === 429 || (status >= 500 && status < 600);
}
