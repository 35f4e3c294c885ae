/**
 * One attempt of the fetch client: a POST under its deadlines, its body read whole or as Server-Sent Events
 * and never past the byte limit. Never throws (but what `onDelta` throws): the retry loop decides what a
 * failure (named in `_failure.ts`) means.
 * @module
 */
import { abortable } from "../abort.ts";
import { noteResponse } from "../telemetry.ts";
import { chunkReader } from "../chunk_reader.ts";
import type { ChatReply } from "../types.ts";
import {
  ABORTED,
  type AttemptContext,
  classify,
  type Failure,
  httpFailure,
  invalid,
  type Thrown,
  tooLarge,
} from "./_failure.ts";
import type { ChatOptions } from "./llm.ts";
import { SseParser } from "./stream.ts";
import { invalidResponseError, quoteBody } from "./wire.ts";

/** What a streamed attempt reports as it reads: answer text and reasoning's arrival (see `ChatOptions`). */
export type StreamProgress = Pick<ChatOptions, "onDelta" | "onReasoning">;

/** The result of one attempt: a reply, or why there is none. */
export type Attempt = { ok: true; reply: ChatReply } | { ok: false; failure: Failure };

/** Enough of a non-2xx body for the provider's JSON error, whose start is quoted; the rest goes unread. */
const MAX_ERROR_BODY_BYTES = 16_384;

function fail(failure: Failure): Attempt {
  return { ok: false, failure };
}

/** One attempt's deadlines on one signal: the whole attempt (never extended) and a stream's silence. */
class Deadlines {
  #controller = new AbortController();
  readonly signal = this.#controller.signal;
  passed: Thrown["passed"] = null;
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

  #expire(name: "whole" | "idle"): void {
    if (this.passed !== null) return;
    this.passed = name;
    this.clear();
    this.#controller.abort(new DOMException("LLM request timed out", "TimeoutError"));
  }
}

/**
 * Reads the body as UTF-8 up to `limit` bytes, so a body past it is never held whole (`over`: only its first
 * `limit` bytes). Rejects as soon as `signal` (the fetch's own) aborts; cancels what it did not read, on every
 * path.
 */
async function readText(
  response: Response,
  limit: number,
  signal: AbortSignal,
): Promise<{ text: string; over: boolean }> {
  const { body } = response;
  if (body === null) return { text: "", over: false };
  // A length within the limit is read in one go, into a buffer of that size: the fetch's signal still stops
  // it, and the transport refuses more bytes than announced. Otherwise the bytes are counted as they come,
  // through one small reused buffer.
  const declared = Number(response.headers.get("content-length") ?? NaN);
  if (Number.isInteger(declared) && declared <= limit) return { text: await response.text(), over: false };
  const reader = chunkReader(body);
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

function parseBody(text: string, { host, model, origin, dialect }: AttemptContext): Attempt {
  try {
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      throw invalidResponseError(`body is not JSON: ${quoteBody(text)}`, host);
    }
    const { reply, id } = dialect.read(json, { model, source: host, origin });
    noteResponse(reply.finishReason, id);
    return { ok: true, reply };
  } catch (error) {
    return fail(invalid(error));
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
  progress: StreamProgress,
): Promise<Attempt> {
  const { onDelta } = progress;
  const { stream, apiKey, maxReplyBytes, dialect } = context;
  const deadlines = new Deadlines(context.timeoutSeconds);
  const combined = signal === undefined ? deadlines.signal : AbortSignal.any([signal, deadlines.signal]);
  const thrown = (error: unknown, where: Pick<Thrown, "status" | "bytes"> = {}) =>
    fail(classify({ error, aborted: signal?.aborted ?? false, passed: deadlines.passed, ...where }, context));
  const headers: Record<string, string> = { "Content-Type": "application/json", ...dialect.headers };
  if (stream) headers.Accept = "text/event-stream";
  if (apiKey !== "") Object.assign(headers, dialect.auth(apiKey));
  try {
    let response: Response;
    try {
      const fetch = context.fetch; // never called as a method of the context
      response = await fetch(context.url, { method: "POST", headers, body, signal: combined });
    } catch (error) {
      return thrown(error);
    }
    const json = (response.headers.get("content-type") ?? "").toLowerCase().includes("application/json");
    if (stream && response.ok && response.body !== null && !json) {
      return await readEvents(context, response.body, deadlines, combined, signal, progress, thrown);
    }
    const limit = response.ok ? maxReplyBytes : Math.min(maxReplyBytes, MAX_ERROR_BODY_BYTES);
    let read: { text: string; over: boolean };
    try {
      read = await readText(response, limit, combined);
    } catch (error) {
      // A whole body that broke after the host answered is said so, rather than "unreachable".
      return thrown(error, { status: stream ? undefined : response.status });
    }
    if (!response.ok) return fail(httpFailure(response, read.text, context));
    if (read.over) return fail(tooLarge(context));
    const outcome = parseBody(read.text, context);
    if (stream && outcome.ok && outcome.reply.content) onDelta?.(outcome.reply.content);
    return outcome;
  } finally {
    deadlines.clear();
  }
}

/**
 * Reads an event stream into a reply, passing answer text to `onDelta` as it arrives and calling `onReasoning`
 * for each chunk that carries reasoning (never with its text). Once the body flows,
 * each silence is bounded by `idleTimeoutSeconds`, restarted by any bytes (keep-alive comments included).
 */
async function readEvents(
  context: AttemptContext,
  body: ReadableStream<Uint8Array>,
  deadlines: Deadlines,
  combined: AbortSignal,
  signal: AbortSignal | undefined,
  { onDelta, onReasoning }: StreamProgress,
  thrown: (error: unknown, where: Pick<Thrown, "bytes">) => Attempt,
): Promise<Attempt> {
  const reader = chunkReader(body);
  const parser = new SseParser();
  const assembler = context.dialect.stream({
    model: context.model,
    source: context.host,
    origin: context.origin,
  });
  let bytes = 0;
  let shown = false;
  try {
    while (!assembler.done) {
      let chunk: ReadableStreamReadResult<Uint8Array>;
      try {
        chunk = await abortable(reader.read(), [combined]);
      } catch (error) {
        return thrown(error, { bytes });
      }
      if (!chunk.done && chunk.value.byteLength > 0) {
        bytes += chunk.value.byteLength;
        // Counted before parsing: an endless answer is dropped at the limit, never held whole.
        if (bytes > context.maxReplyBytes) return fail(tooLarge(context));
        deadlines.restartIdle(context.idleTimeoutSeconds);
      }
      for (const event of chunk.done ? parser.end() : parser.push(chunk.value)) {
        let piece: string;
        const reasoned = assembler.reasoningChunks;
        try {
          piece = assembler.add(event);
        } catch (error) {
          // A provider's error event (overloaded) before any text was shown may be retried.
          return fail(invalid(error, !shown));
        }
        if (signal?.aborted) return fail(ABORTED);
        if (assembler.reasoningChunks > reasoned) onReasoning?.();
        if (piece !== "") {
          shown = true;
          onDelta?.(piece);
        }
        if (assembler.done) break;
      }
      if (chunk.done) break;
    }
    if (signal?.aborted) return fail(ABORTED);
    const reason = `the stream ended after ${bytes} bytes ${assembler.missing}`;
    const cut = () => fail(invalid(invalidResponseError(reason, context.host)));
    let reply: ChatReply;
    try {
      reply = { ...assembler.reply(), finishReason: assembler.finishReason };
    } catch (error) {
      return assembler.complete ? fail(invalid(error)) : cut();
    }
    // A cut stream's tool calls come back (`finishReason: null`) for the loop to refuse, so the turn can ask
    // again; a partial answer is never passed on as whole.
    if (!assembler.complete && reply.toolCalls.length === 0) return cut();
    noteResponse(assembler.finishReason, assembler.responseId);
    return { ok: true, reply };
  } finally {
    // Frees the connection when the stream stops early ([DONE], an error); a no-op on a finished body.
    await reader.cancel().catch(() => {});
  }
}
