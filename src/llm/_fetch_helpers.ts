/**
 * Private helpers of the fetch client: how an attempt's failure is classified, waits that honour an abort
 * signal, error descriptions without URLs' paths, and option checks.
 * @module
 */
import type { LlmErrorKind } from "../errors.ts";
import type { ChatReply } from "../types.ts";

/** One failed attempt, classified. */
export interface Failure {
  kind: LlmErrorKind;
  /** Already redacted. */
  message: string;
  status: number | null;
  retryable: boolean;
  /** The provider's `Retry-After` in ms, which replaces the backoff for this retry. */
  retryAfterMs: number | null;
}

/** The result of one attempt, streaming or not: a reply, or why there is none. */
export type Attempt = { ok: true; reply: ChatReply } | { ok: false; failure: Failure };

/** Waits `ms`, or rejects with the signal's reason as soon as it aborts; always clears its timer. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** The messages of an error and its causes, with URLs cut to their host (no path, no query). */
export function describeThrown(error: unknown): string {
  const parts: string[] = [];
  let current: unknown = error;
  for (let depth = 0; current !== undefined && current !== null && depth < 4; depth++) {
    const text = current instanceof Error ? current.message : String(current);
    if (text !== "" && !parts.includes(text)) parts.push(text);
    current = current instanceof Error ? current.cause : undefined;
  }
  return parts.join(": ").replace(/https?:\/\/[^\s)]+/g, (url) => {
    try {
      return new URL(url).host;
    } catch {
      return "[url]";
    }
  });
}

/** The next chunk of `reader`, or a rejection with the reason as soon as `signal` aborts. */
export function readOrAbort(
  reader: ReadableStreamDefaultReader<Uint8Array>,
  signal: AbortSignal,
): Promise<ReadableStreamReadResult<Uint8Array>> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    // The read left pending on abort settles when the caller cancels the reader.
    reader.read().then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

/** Whether the response says its body is JSON (a server that ignored `stream`). */
export function isJsonResponse(response: Response): boolean {
  return (response.headers.get("content-type") ?? "").toLowerCase().includes("application/json");
}

/** The statuses worth another attempt: 408, 409, 429 and 5xx. */
export function isRetryableStatus(status: number): boolean {
  return status === 408 || status === 409 || status === 429 || (status >= 500 && status < 600);
}

/** The start of every constructor misuse message. */
export const CANNOT_CREATE = "Cannot create OpenAICompatibleLLM";

/** Throws `TypeError` unless `value` is undefined or a function. */
export function requireFunction(name: string, value: unknown): void {
  if (value !== undefined && typeof value !== "function") {
    throw new TypeError(`${CANNOT_CREATE}: "${name}" must be a function, got ${typeof value}`);
  }
}

/** Throws `TypeError` for a non-number, `RangeError` for a number outside `inRange`. */
export function requireNumber(
  name: string,
  value: unknown,
  expected: string,
  inRange: (n: number) => boolean,
): void {
  if (typeof value !== "number") {
    throw new TypeError(`${CANNOT_CREATE}: "${name}" must be ${expected}, got ${typeof value}`);
  }
  if (!Number.isFinite(value) || !inRange(value)) {
    throw new RangeError(`${CANNOT_CREATE}: "${name}" must be ${expected}, got ${value}`);
  }
}
