/**
 * The `Idempotency-Key` request header of `POST /v1/chat/completions`: a request marked with a key runs once
 * per user and key; a repeat within a day gets the first one's response (status, content type, body; a
 * stream's whole text at once) instead of running the turn again. The key is not a secret, but it is the
 * client's: it never reaches a log line or the trace.
 * @module
 */
import {
  IDEMPOTENCY_KEY,
  IDEMPOTENCY_RUNNING_MS,
  type IdempotencyStore,
  type RequestKey,
  type StoredResponse,
} from "../store/store.ts";
import type { HandlerDeps } from "./deps.ts";
import { HttpError, toHttpError } from "./errors.ts";
import { openaiErrorBody, openaiErrorResponse } from "./openai_shape.ts";

/** The request header that marks a request to be run once. */
export const IDEMPOTENCY_HEADER = "Idempotency-Key";

/** The response header of an answer that is a stored response replayed. */
export const REPLAYED_HEADER = "idempotent-replayed";

/** Bytes of a response kept for its repeats; a larger one is kept as the note that it was too large. */
export const MAX_KEPT_BYTES = 1_048_576;

/** Time a running claim is given past the turn's own time limit before it counts as dead. */
const RUNNING_GRACE_MS = 60_000;

/**
 * The request's idempotency key, or null without the header. A 400 `invalid_idempotency_key` in OpenAI's
 * shape unless it is 1-255 visible ASCII characters (the message never shows it).
 */
export function idempotencyKey(headers: Headers): string | null {
  const value = headers.get(IDEMPOTENCY_HEADER);
  if (value === null || IDEMPOTENCY_KEY.test(value)) return value;
  const message = `The ${IDEMPOTENCY_HEADER} header must be 1-255 visible ASCII characters ` +
    `(no spaces), got ${value.length} characters`;
  throw new HttpError(400, "invalid_idempotency_key", message, { details: { param: null } });
}

/**
 * What a repeat must ask to get the first request's response: the SHA-256, in hex, of the route's path, the
 * session the request continues (none: empty) and its parsed body written as JSON again (the same bytes
 * always give the same text; spacing does not count).
 */
export async function requestHash(path: string, sessionId: string | null, body: unknown): Promise<string> {
  const text = `${path}\n${sessionId ?? ""}\n${JSON.stringify(body)}`;
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return Array.from(new Uint8Array(digest), (byte) => byte.toString(16).padStart(2, "0")).join("");
}

/** A request marked with an idempotency key, and where its claim is kept. */
export interface OnceRequest {
  store: IdempotencyStore;
  key: RequestKey;
  /** {@linkcode requestHash} of the request. */
  hash: string;
  /** Gets a line when the store fails to keep or free the claim (never the key). */
  log(line: string): void;
  /**
   * The turn's time limit (AGENT_TURN_TIMEOUT_SECONDS): a running claim counts as dead after it and a minute,
   * or after 15 min when that is later. @default {null} (no limit: 15 min)
   */
  turnTimeoutSeconds?: number | null;
  /** Bytes of a response kept for its repeats. @default {MAX_KEPT_BYTES} */
  maxKeptBytes?: number;
}

/**
 * Answers `request` once: claims its key, then by what the claim found
 * - `done`: the stored response, with `idempotent-replayed: true` (and `x-should-retry: false`: it is final);
 * - `running`: a 409 `idempotency_key_in_use` with `Retry-After: 1` (the official clients retry a 409);
 * - `mismatch`: a 422 `idempotency_key_reused` (the key was used for another body within the day);
 * - `new`: `answer`, whose response is kept as it goes to the client (a stream teed) once its work is done.
 *
 * `answer` calls `didWork` when it did work a repeat must not do again (a turn that ran to its end, answered
 * or failed and kept). A response or a rejection without it (the request refused before any work, a turn
 * taken back: the client gone, a cancel, the shutdown) frees the key; a rejection after it is kept as its
 * error response. A response over `maxKeptBytes` is kept as a 422 `idempotency_result_too_large`. Rejects with
 * an `HttpError` (the claim's, or `answer`'s rejection before any work); a failure of the store to keep or free
 * the claim afterwards is logged, never the response's.
 */
export async function answerOnce(
  request: OnceRequest,
  answer: (didWork: () => void) => Promise<Response>,
): Promise<Response> {
  const { store, key, hash, log, turnTimeoutSeconds = null, maxKeptBytes = MAX_KEPT_BYTES } = request;
  const runningMs = Math.max(IDEMPOTENCY_RUNNING_MS, (turnTimeoutSeconds ?? 0) * 1000 + RUNNING_GRACE_MS);
  const claim = await store.claimRequest(key, hash, { runningMs });
  if (claim.state === "done") return replay(claim.response);
  if (claim.state === "running") throw inUse();
  if (claim.state === "mismatch") throw reused();
  let worked = false;
  const settle = async (response: StoredResponse | null) => {
    try {
      if (worked && response !== null) await store.finishRequest(claim.held, response);
      else await store.releaseRequest(claim.held);
    } catch (error) {
      log(
        `warning: cannot ${worked ? "keep" : "free"} a request's idempotency key: ${
          (error as Error).message
        }`,
      );
    }
  };
  let response: Response;
  try {
    response = await answer(() => worked = true);
  } catch (error) {
    const failure = toHttpError(error, log);
    if (!worked) {
      await settle(null);
      throw failure;
    }
    response = openaiErrorResponse(failure);
  }
  const stored = (body: Uint8Array | null): StoredResponse =>
    body === null || body.byteLength > maxKeptBytes ? tooLarge(maxKeptBytes) : {
      status: response.status,
      contentType: response.headers.get("content-type") ?? "application/octet-stream",
      body: new TextDecoder().decode(body),
    };
  if (response.body === null) {
    await settle(stored(new Uint8Array(0)));
    return response;
  }
  if (!/^text\/event-stream\b/.test(response.headers.get("content-type") ?? "")) {
    const body = new Uint8Array(await response.arrayBuffer());
    await settle(stored(body));
    return new Response(body, { status: response.status, headers: response.headers });
  }
  return teed(response, maxKeptBytes, (body) => settle(body === "failed" ? null : stored(body)));
}

/**
 * `response` with its body passed on as it comes and kept: `settle` gets the whole body once it ended (null:
 * it passed `maxBytes`; `"failed"`: it broke off), before the client sees its end. A client that leaves does
 * not stop the reading: the turn learns of it from the request's signal, and the body ends when the turn does
 * (taken back, or finished and then kept).
 */
function teed(
  response: Response,
  maxBytes: number,
  settle: (body: Uint8Array | null | "failed") => Promise<void>,
): Response {
  const reader = response.body!.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  let settled: Promise<void> | undefined;
  let gone = false;
  const keep = (chunk: Uint8Array) => {
    size += chunk.byteLength;
    // Past the bound nothing more is kept: only that it was passed matters.
    if (size <= maxBytes) chunks.push(chunk);
  };
  const end = (failed: boolean) => {
    settled ??= settle(failed ? "failed" : size > maxBytes ? null : concat(chunks));
    return settled;
  };
  /** The next chunk, kept; null at the end, settled first. */
  const next = async (): Promise<Uint8Array | null> => {
    let read: ReadableStreamReadResult<Uint8Array>;
    try {
      read = await reader.read();
    } catch (error) {
      await end(true);
      throw error;
    }
    if (read.done) {
      await end(false);
      return null;
    }
    keep(read.value);
    return read.value;
  };
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      const chunk = await next();
      if (gone) return;
      if (chunk === null) controller.close();
      else controller.enqueue(chunk);
    },
    async cancel() {
      gone = true;
      while (await next().catch(() => null) !== null);
    },
  });
  return new Response(body, { status: response.status, headers: response.headers });
}

function concat(chunks: readonly Uint8Array[]): Uint8Array {
  const all = new Uint8Array(chunks.reduce((sum, chunk) => sum + chunk.byteLength, 0));
  let offset = 0;
  for (const chunk of chunks) {
    all.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return all;
}

/** The stored response as the answer to a repeat. */
function replay(stored: StoredResponse): Response {
  const headers = new Headers({
    "content-type": stored.contentType,
    [REPLAYED_HEADER]: "true",
    "x-should-retry": "false",
  });
  if (/^text\/event-stream\b/.test(stored.contentType)) headers.set("cache-control", "no-cache");
  return new Response(stored.body, { status: stored.status, headers });
}

function inUse(): HttpError {
  const message = `A request with this ${IDEMPOTENCY_HEADER} is still running; ` +
    "send it again once it has ended to get its result";
  return new HttpError(409, "idempotency_key_in_use", message, {
    headers: { "Retry-After": "1" },
    details: { param: null },
  });
}

function reused(): HttpError {
  const message = `This ${IDEMPOTENCY_HEADER} was used within the last 24 hours for a request with another ` +
    "body; use a new key for a new request";
  return new HttpError(422, "idempotency_key_reused", message, { details: { param: null } });
}

/** What is kept of a response over `maxBytes`: a repeat learns that its result was not kept. */
function tooLarge(maxBytes: number): StoredResponse {
  const message =
    `The result of the request with this ${IDEMPOTENCY_HEADER} was over ${maxBytes} bytes and ` +
    "was not kept; use a new key to run the request again";
  const error = new HttpError(422, "idempotency_result_too_large", message, { details: { param: null } });
  return {
    status: error.status,
    contentType: "application/json; charset=utf-8",
    body: JSON.stringify(openaiErrorBody(error)),
  };
}

/** A request of an OpenAI-shaped route, read: its key (null: none), whose it is, the session it goes to. */
export interface MarkedRequest {
  request: Request;
  key: string | null;
  userId: string;
  sessionId: string | null;
  /** The parsed body, as {@linkcode requestHash} reads it. */
  body: unknown;
}

/**
 * Answers `marked` by `answer`: at once without an idempotency key, else once per user and key
 * ({@linkcode answerOnce}), the store and the turn's time limit from `deps`.
 */
export async function answerMarked(
  marked: MarkedRequest,
  deps: Pick<HandlerDeps, "store" | "log" | "agent">,
  answer: (didWork?: () => void) => Promise<Response>,
): Promise<Response> {
  const { request, key, userId, sessionId, body } = marked;
  if (key === null) return await answer();
  const hash = await requestHash(new URL(request.url).pathname, sessionId, body);
  const { turnTimeoutSeconds } = deps.agent;
  const once = { store: deps.store, key: { userId, key }, hash, log: deps.log, turnTimeoutSeconds };
  return await answerOnce(once, answer);
}
