/**
 * Private helpers of the fetch client: how an attempt's failure is classified, waits and reads that honour
 * an abort signal, a body read under a byte limit, an attempt's deadlines, error descriptions without URLs'
 * paths, and option checks.
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

/** What {@linkcode readText} read. */
export interface BoundedText {
  /** The body as UTF-8 text; when `over`, only its first `limit` bytes. */
  text: string;
  /** Whether the body held more than `limit` bytes: reading stopped there and the rest was cancelled. */
  over: boolean;
}

/**
 * Reads `body` as UTF-8 text chunk by chunk, and stops as soon as more than `limit` bytes have arrived, so
 * a body past the limit is never held whole. Rejects with the signal's reason as soon as it aborts, or with
 * the stream's error; cancels whatever it did not read, on every path.
 */
export async function readText(
  body: ReadableStream<Uint8Array> | null,
  limit: number,
  signal: AbortSignal,
): Promise<BoundedText> {
  if (body === null) return { text: "", over: false };
  const reader = body.getReader();
  const decoder = new TextDecoder();
  const parts: string[] = [];
  let bytes = 0;
  try {
    for (;;) {
      const chunk = await readOrAbort(reader, signal);
      if (chunk.done) break;
      const room = limit - bytes;
      bytes += chunk.value.byteLength;
      if (bytes > limit) {
        parts.push(decoder.decode(chunk.value.subarray(0, room)));
        return { text: parts.join(""), over: true };
      }
      parts.push(decoder.decode(chunk.value, { stream: true }));
    }
    parts.push(decoder.decode());
    return { text: parts.join(""), over: false };
  } finally {
    await reader.cancel().catch(() => {});
  }
}

/** Which deadline of an attempt passed: the whole attempt's, or the longest silence of a stream. */
export type DeadlineName = "whole" | "idle";

/**
 * The deadlines of one attempt on one abort signal: the whole attempt, from the request to the last byte
 * (armed at construction, never extended), and the longest silence between two chunks of a streamed body
 * (armed by {@linkcode Deadlines.restartIdle}). {@linkcode Deadlines.clear} must run on every path.
 */
export class Deadlines {
  #controller = new AbortController();
  #whole: ReturnType<typeof setTimeout>;
  #idle: ReturnType<typeof setTimeout> | undefined;
  #passed: DeadlineName | null = null;

  constructor(seconds: number) {
    this.#whole = setTimeout(() => this.#expire("whole"), seconds * 1000);
  }

  /** Aborts (with a `TimeoutError`) when the first deadline passes. */
  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** Which deadline passed first, if one did. */
  get passed(): DeadlineName | null {
    return this.#passed;
  }

  /** Starts the silence deadline again: `seconds` from now. The whole-attempt deadline is untouched. */
  restartIdle(seconds: number): void {
    clearTimeout(this.#idle);
    this.#idle = setTimeout(() => this.#expire("idle"), seconds * 1000);
  }

  clear(): void {
    clearTimeout(this.#whole);
    clearTimeout(this.#idle);
  }

  #expire(name: DeadlineName): void {
    if (this.#passed !== null) return;
    this.#passed = name;
    this.clear();
    this.#controller.abort(new DOMException("LLM request timed out", "TimeoutError"));
  }
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
