/**
 * One attempt of the fetch client: a POST under its own deadlines, its body read whole or as Server-Sent
 * Events, never past the reply byte limit. An attempt never throws (but for what `onDelta` throws): it resolves with the reply or a classified
 * failure, and the client's retry loop decides what comes next. Private to `openai.ts`.
 * @module
 */
import {
  type Attempt,
  type BoundedText,
  Deadlines,
  isJsonResponse,
  readOrAbort,
  readText,
} from "./_fetch_helpers.ts";
import type { FailureContext, Failures } from "./_failures.ts";
import { ReplyAssembler } from "./_reply_assembler.ts";
import { SseParser } from "./_sse.ts";
import { invalidResponseError } from "./_wire.ts";

/** What every attempt of one client shares: what its failures name, and where and how it posts. */
export interface AttemptContext extends FailureContext {
  /** `{baseUrl}/chat/completions` */
  url: string;
  fetch: typeof globalThis.fetch;
  failures: Failures;
}

function headers(context: AttemptContext, stream: boolean): Record<string, string> {
  const headers: Record<string, string> = { "Content-Type": "application/json" };
  if (stream) headers.Accept = "text/event-stream";
  if (context.apiKey !== "") headers.Authorization = `Bearer ${context.apiKey}`;
  return headers;
}

/** The POST of one attempt. A local copy of `fetch`, so it is never called as a method of the context. */
function post(
  context: AttemptContext,
  body: string,
  signal: AbortSignal,
  stream: boolean,
): Promise<Response> {
  const fetch = context.fetch;
  return fetch(context.url, { method: "POST", headers: headers(context, stream), body, signal });
}

/**
 * The most of a non-2xx body kept in memory: enough for the provider's JSON error, whose start is quoted in
 * the message; the rest is cancelled unread.
 */
export const MAX_ERROR_BODY_BYTES = 16_384;

/** How much of a response's body to read: the reply limit, or less for an error body. */
function bodyLimit(context: AttemptContext, response: Response): number {
  return response.ok ? context.maxReplyBytes : Math.min(context.maxReplyBytes, MAX_ERROR_BODY_BYTES);
}

/** One POST whose body is read under the deadline (`timeoutSeconds`) and the byte limit, whatever the status. */
export async function plainAttempt(
  context: AttemptContext,
  body: string,
  signal: AbortSignal | undefined,
): Promise<Attempt> {
  const { failures } = context;
  const deadlines = new Deadlines(context.timeoutSeconds);
  const combined = signal === undefined ? deadlines.signal : AbortSignal.any([signal, deadlines.signal]);
  let response: Response | undefined;
  let read: BoundedText;
  try {
    response = await post(context, body, combined, false);
    // Reading the body under the same deadline also frees it, whatever the status.
    read = await readText(response.body, bodyLimit(context, response), combined);
  } catch (error) {
    const failure = failures.thrown(error, signal, deadlines.signal);
    // The host answered and then the body broke: say so, rather than "unreachable" (still retried).
    if (response !== undefined && failure.kind === "network") {
      return { ok: false, failure: failures.brokenBody(error, response.status, failure.retryable) };
    }
    return { ok: false, failure };
  } finally {
    deadlines.clear();
  }
  if (!response.ok) return { ok: false, failure: failures.http(response, read.text) };
  if (read.over) return { ok: false, failure: failures.tooLarge() };
  return failures.parse(read.text);
}

/**
 * One streaming POST, its body read as Server-Sent Events under two deadlines: the whole attempt's
 * (`timeoutSeconds`, from the request to the last byte, never extended) and, once the body flows, the
 * longest silence (`idleTimeoutSeconds`, restarted by every chunk, keep-alive comments included). Stops at
 * `maxReplyBytes`. Clears its timers and cancels the body on every path.
 */
export async function streamAttempt(
  context: AttemptContext,
  body: string,
  signal: AbortSignal | undefined,
  onDelta: ((text: string) => void) | undefined,
): Promise<Attempt> {
  const { failures, maxReplyBytes } = context;
  const deadlines = new Deadlines(context.timeoutSeconds);
  const combined = signal === undefined ? deadlines.signal : AbortSignal.any([signal, deadlines.signal]);
  let reader: ReadableStreamDefaultReader<Uint8Array> | undefined;
  try {
    let response: Response;
    let read: BoundedText | undefined;
    try {
      response = await post(context, body, combined, true);
      if (!response.ok || response.body === null || isJsonResponse(response)) {
        read = await readText(response.body, bodyLimit(context, response), combined);
      }
    } catch (error) {
      return { ok: false, failure: failures.thrown(error, signal, deadlines.signal) };
    }
    if (!response.ok) return { ok: false, failure: failures.http(response, read?.text ?? "") };
    if (read !== undefined || response.body === null) {
      // A server that ignores `stream: true` sends one whole completion.
      if (read?.over) return { ok: false, failure: failures.tooLarge() };
      const outcome = failures.parse(read?.text ?? "");
      if (outcome.ok && outcome.reply.content) onDelta?.(outcome.reply.content);
      return outcome;
    }
    reader = response.body.getReader();
    const parser = new SseParser();
    const assembler = new ReplyAssembler({ model: context.model, source: context.host });
    let bytes = 0;
    while (!assembler.done) {
      let chunk: ReadableStreamReadResult<Uint8Array>;
      try {
        chunk = await readOrAbort(reader, combined);
      } catch (error) {
        const failure = bytes === 0
          ? failures.thrown(error, signal, deadlines.signal)
          : failures.brokenStream(error, signal, deadlines.passed, bytes);
        return { ok: false, failure };
      }
      if (!chunk.done && chunk.value.byteLength > 0) {
        bytes += chunk.value.byteLength;
        // Counted before parsing: an endless answer is dropped at the limit, never held whole.
        if (bytes > maxReplyBytes) return { ok: false, failure: failures.tooLarge() };
        deadlines.restartIdle(context.idleTimeoutSeconds);
      }
      for (const event of chunk.done ? parser.end() : parser.push(chunk.value)) {
        let piece: string;
        try {
          piece = assembler.add(event);
        } catch (error) {
          return { ok: false, failure: failures.invalid(error) };
        }
        if (signal?.aborted) return { ok: false, failure: failures.aborted() };
        if (piece !== "") onDelta?.(piece);
        if (assembler.done) break;
      }
      if (chunk.done) break;
    }
    if (signal?.aborted) return { ok: false, failure: failures.aborted() };
    if (!assembler.complete) {
      const reason = `the stream ended after ${bytes} bytes without [DONE] or a finish_reason`;
      return { ok: false, failure: failures.invalid(invalidResponseError(reason, context.host)) };
    }
    try {
      return { ok: true, reply: assembler.reply() };
    } catch (error) {
      return { ok: false, failure: failures.invalid(error) };
    }
  } finally {
    deadlines.clear();
    // Frees the connection when the stream stops early ([DONE], an error); a no-op on a finished body.
    await reader?.cancel().catch(() => {});
  }
}
