/**
 * One attempt of the fetch client: a POST under its deadlines, its body read whole or as Server-Sent Events
 * and never past the byte limit, what went wrong named by pure functions. Never throws (but what `onDelta`
 * throws): the retry loop decides what a failure means.
 * @module
 */
import { abortable } from "../abort.ts";
import { LlmError, type LlmErrorKind } from "../errors.ts";
import type { ChatReply } from "../types.ts";
import { ReplyAssembler, SseParser } from "./stream.ts";
import {
  invalidResponseError,
  parseCompletion,
  parseRetryAfter,
  providerErrorMessage,
  quoteBody,
} from "./wire.ts";

/** One failed attempt, classified. Its message may hold the key: the client redacts what it shows. */
export interface Failure {
  kind: LlmErrorKind;
  message: string;
  status: number | null;
  retryable: boolean;
  /** The provider's `Retry-After` in ms, which replaces the backoff for this retry. */
  retryAfterMs: number | null;
}

/** The result of one attempt: a reply, or why there is none. */
export type Attempt = { ok: true; reply: ChatReply } | { ok: false; failure: Failure };

/** What every attempt of one client shares: where and how it posts, what its failures name. */
export interface AttemptContext {
  /** `{baseUrl}/chat/completions` */
  url: string;
  /** Named in messages instead of the URL, whose path may be private. */
  host: string;
  model: string;
  apiKey: string;
  stream: boolean;
  timeoutSeconds: number;
  idleTimeoutSeconds: number;
  maxReplyBytes: number;
  fetch: typeof globalThis.fetch;
  now: () => number;
}

/** The failure of an aborted call. */
export const ABORTED: Failure = Object.freeze(failure("aborted", "LLM request was aborted", false));

/** Enough of a non-2xx body for the provider's JSON error, whose start is quoted; the rest goes unread. */
const MAX_ERROR_BODY_BYTES = 16_384;

function failure(
  kind: LlmErrorKind,
  message: string,
  retryable: boolean,
  status: number | null = null,
): Failure {
  return { kind, message, status, retryable, retryAfterMs: null };
}

/** The messages of an error and its causes, with URLs cut to their host (no path, no query). */
function describeThrown(error: unknown): string {
  const parts: string[] = [];
  let current: unknown = error;
  for (let depth = 0; current !== undefined && current !== null && depth < 4; depth++) {
    const text = current instanceof Error ? current.message : String(current);
    if (text !== "" && !parts.includes(text)) parts.push(text);
    current = current instanceof Error ? current.cause : undefined;
  }
  return parts.join(": ").replace(/https?:\/\/[^\s)]+/g, (url) => URL.parse(url)?.host ?? "[url]");
}

/** Where an attempt was when `error` was thrown. */
interface Thrown {
  error: unknown;
  /** The caller's signal aborted. */
  aborted: boolean;
  /** Which deadline passed, if one did. */
  passed: DeadlineName | null;
  /** A whole body that broke mid-read: the status the host had answered. */
  status?: number;
  /** Stream bytes already read: after any, nothing is retried, since the caller may have shown the text. */
  bytes?: number;
}

/** Names a throw: an abort, a deadline, the network (only fetch's `TypeError` is worth another attempt). */
function classify(thrown: Thrown, context: AttemptContext): Failure {
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
    return failure(
      "timeout",
      `${stream} stalled: no data for ${idleTimeoutSeconds} s after ${bytes} bytes`,
      false,
    );
  }
  if (bytes > 0) {
    return failure("network", `${stream} broke after ${bytes} bytes: ${describeThrown(error)}`, false);
  }
  if (passed !== null) return failure("timeout", `LLM request timed out after ${timeoutSeconds} s`, true);
  const message = status === undefined
    ? `LLM host ${host} is unreachable: ${describeThrown(error)}`
    : `LLM response from ${host} broke mid-body (HTTP ${status}): ${describeThrown(error)}`;
  return failure("network", message, error instanceof TypeError);
}

/** A non-2xx answer, with the provider's own message when it sent one, and its `Retry-After`. */
function httpFailure(response: Response, text: string, context: AttemptContext): Failure {
  const { status } = response;
  let detail: string | null = null;
  try {
    detail = providerErrorMessage(JSON.parse(text));
  } catch {
    // Not JSON (an HTML error page, a proxy's text): the text itself is quoted.
  }
  detail = quoteBody(detail ?? text) || response.statusText;
  const said = detail === "" ? "" : `: ${detail}`;
  const retryable = status === 408 || status === 409 || status === 429 || (status >= 500 && status < 600);
  const message = `LLM request failed: HTTP ${status} from ${context.host}${said}`;
  const result = failure("http", message, retryable, status);
  if (retryable) result.retryAfterMs = parseRetryAfter(response.headers.get("retry-after"), context.now());
  return result;
}

/** Never retried: the next answer would be as long. */
function tooLarge({ host, maxReplyBytes }: AttemptContext): Attempt {
  const message = `LLM reply from ${host} is too large: it went past the limit of ${maxReplyBytes} bytes`;
  return { ok: false, failure: failure("too_large", message, false) };
}

/** An `LlmError` from parsing becomes an `invalid_response` failure; anything else is a bug, rethrown. */
function invalid(error: unknown): Attempt {
  if (!(error instanceof LlmError)) throw error;
  return { ok: false, failure: failure("invalid_response", error.message, false) };
}

function parseBody(text: string, { host, model }: AttemptContext): Attempt {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return invalid(invalidResponseError(`body is not JSON: ${quoteBody(text)}`, host));
  }
  try {
    return { ok: true, reply: parseCompletion(json, { model, source: host }) };
  } catch (error) {
    return invalid(error);
  }
}

/** Which deadline of an attempt passed: the whole attempt's, or the longest silence of a stream. */
type DeadlineName = "whole" | "idle";

/** One attempt's deadlines on one signal: the whole attempt (never extended) and a stream's silence. */
class Deadlines {
  #controller = new AbortController();
  readonly signal = this.#controller.signal;
  passed: DeadlineName | null = null;
  #whole: ReturnType<typeof setTimeout>;
  #idle: ReturnType<typeof setTimeout> | undefined;

  constructor(seconds: number) {
    this.#whole = setTimeout(() => this.#expire("whole"), seconds * 1000);
  }

  restartIdle(seconds: number): void {
    clearTimeout(this.#idle);
    this.#idle = setTimeout(() => this.#expire("idle"), seconds * 1000);
  }

  clear(): void {
    clearTimeout(this.#whole);
    clearTimeout(this.#idle);
  }

  #expire(name: DeadlineName): void {
    if (this.passed !== null) return;
    this.passed = name;
    this.clear();
    this.#controller.abort(new DOMException("LLM request timed out", "TimeoutError"));
  }
}

/**
 * Reads `body` as UTF-8 up to `limit` bytes, so a body past it is never held whole (`over`: only its first
 * `limit` bytes). Rejects as soon as `signal` aborts; cancels what it did not read, on every path.
 */
async function readText(
  body: ReadableStream<Uint8Array> | null,
  limit: number,
  signal: AbortSignal,
): Promise<{ text: string; over: boolean }> {
  if (body === null) return { text: "", over: false };
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let text = "";
  let bytes = 0;
  try {
    for (;;) {
      const chunk = await abortable(reader.read(), [signal]);
      if (chunk.done) return { text: text + decoder.decode(), over: false };
      const room = limit - bytes;
      bytes += chunk.value.byteLength;
      if (bytes > limit) return { text: text + decoder.decode(chunk.value.subarray(0, room)), over: true };
      text += decoder.decode(chunk.value, { stream: true });
    }
  } finally {
    await reader.cancel().catch(() => {});
  }
}

/**
 * One POST under the attempt's deadline (`timeoutSeconds`, request to last byte), its body read whole, or
 * with `stream` as Server-Sent Events. A server that ignores `stream` and sends one JSON completion is read
 * as such, its text passed to `onDelta` in one piece. Clears its timers and frees the body on every path.
 */
export async function attempt(
  context: AttemptContext,
  body: string,
  signal: AbortSignal | undefined,
  onDelta: ((text: string) => void) | undefined,
): Promise<Attempt> {
  const { stream, apiKey, maxReplyBytes } = context;
  const deadlines = new Deadlines(context.timeoutSeconds);
  const combined = signal === undefined ? deadlines.signal : AbortSignal.any([signal, deadlines.signal]);
  const headers: Record<string, string> = { "Content-Type": "application/json" };
  if (stream) headers.Accept = "text/event-stream";
  if (apiKey !== "") headers.Authorization = `Bearer ${apiKey}`;
  let response: Response | undefined;
  try {
    let read: { text: string; over: boolean } | undefined;
    try {
      const fetch = context.fetch; // never called as a method of the context
      response = await fetch(context.url, { method: "POST", headers, body, signal: combined });
      const json = (response.headers.get("content-type") ?? "").toLowerCase().includes("application/json");
      if (!stream || !response.ok || response.body === null || json) {
        const limit = response.ok ? maxReplyBytes : Math.min(maxReplyBytes, MAX_ERROR_BODY_BYTES);
        read = await readText(response.body, limit, combined);
      }
    } catch (error) {
      // A whole body that broke after the host answered is said so, rather than "unreachable".
      const status = stream ? undefined : response?.status;
      const thrown = { error, aborted: signal?.aborted ?? false, passed: deadlines.passed, status };
      return { ok: false, failure: classify(thrown, context) };
    }
    if (!response.ok) return { ok: false, failure: httpFailure(response, read?.text ?? "", context) };
    if (read === undefined) {
      return await readEvents(context, response.body!, deadlines, combined, signal, onDelta);
    }
    if (read.over) return tooLarge(context);
    const outcome = parseBody(read.text, context);
    if (stream && outcome.ok && outcome.reply.content) onDelta?.(outcome.reply.content);
    return outcome;
  } finally {
    deadlines.clear();
  }
}

/**
 * Reads an event stream into a reply, passing answer text to `onDelta` as it arrives. Once the body flows,
 * each silence is bounded by `idleTimeoutSeconds`, restarted by any bytes (keep-alive comments included).
 */
async function readEvents(
  context: AttemptContext,
  body: ReadableStream<Uint8Array>,
  deadlines: Deadlines,
  combined: AbortSignal,
  signal: AbortSignal | undefined,
  onDelta: ((text: string) => void) | undefined,
): Promise<Attempt> {
  const reader = body.getReader();
  const parser = new SseParser();
  const assembler = new ReplyAssembler({ model: context.model, source: context.host });
  let bytes = 0;
  try {
    while (!assembler.done) {
      let chunk: ReadableStreamReadResult<Uint8Array>;
      try {
        chunk = await abortable(reader.read(), [combined]);
      } catch (error) {
        const thrown = { error, aborted: signal?.aborted ?? false, passed: deadlines.passed, bytes };
        return { ok: false, failure: classify(thrown, context) };
      }
      if (!chunk.done && chunk.value.byteLength > 0) {
        bytes += chunk.value.byteLength;
        // Counted before parsing: an endless answer is dropped at the limit, never held whole.
        if (bytes > context.maxReplyBytes) return tooLarge(context);
        deadlines.restartIdle(context.idleTimeoutSeconds);
      }
      for (const event of chunk.done ? parser.end() : parser.push(chunk.value)) {
        let piece: string;
        try {
          piece = assembler.add(event);
        } catch (error) {
          return invalid(error);
        }
        if (signal?.aborted) return { ok: false, failure: ABORTED };
        if (piece !== "") onDelta?.(piece);
        if (assembler.done) break;
      }
      if (chunk.done) break;
    }
    if (signal?.aborted) return { ok: false, failure: ABORTED };
    if (!assembler.complete) {
      const reason = `the stream ended after ${bytes} bytes without [DONE] or a finish_reason`;
      return invalid(invalidResponseError(reason, context.host));
    }
    try {
      return { ok: true, reply: assembler.reply() };
    } catch (error) {
      return invalid(error);
    }
  } finally {
    // Frees the connection when the stream stops early ([DONE], an error); a no-op on a finished body.
    await reader.cancel().catch(() => {});
  }
}
