/**
 * One attempt of the fetch client: a POST under its own deadline, its body read whole or as Server-Sent
 * Events. An attempt never throws (but for what `onDelta` throws): it resolves with the reply or a classified
 * failure, and the client's retry loop decides what comes next. Private to `openai.ts`.
 * @module
 */
import { type Attempt, isJsonResponse, readOrAbort } from "./_fetch_helpers.ts";
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

function timeoutError(): DOMException {
  return new DOMException("LLM request timed out", "TimeoutError");
}

/** One POST whose whole body is read under the deadline (`timeoutSeconds`), whatever the status. */
export async function plainAttempt(
  context: AttemptContext,
  body: string,
  signal: AbortSignal | undefined,
): Promise<Attempt> {
  const { failures } = context;
  const deadline = new AbortController();
  const timer = setTimeout(() => deadline.abort(timeoutError()), context.timeoutSeconds * 1000);
  const combined = signal === undefined ? deadline.signal : AbortSignal.any([signal, deadline.signal]);
  let response: Response | undefined;
  let text: string;
  try {
    response = await post(context, body, combined, false);
    // Reading the whole body under the same deadline also frees it, whatever the status.
    text = await response.text();
  } catch (error) {
    const failure = failures.thrown(error, signal, deadline.signal);
    // The host answered and then the body broke: say so, rather than "unreachable" (still retried).
    if (response !== undefined && failure.kind === "network") {
      return { ok: false, failure: failures.brokenBody(error, response.status, failure.retryable) };
    }
    return { ok: false, failure };
  } finally {
    clearTimeout(timer);
  }
  if (!response.ok) return { ok: false, failure: failures.http(response, text) };
  return failures.parse(text);
}

/**
 * One streaming POST, its body read as Server-Sent Events under the first-byte deadline, then the idle
 * one. Clears its timer and cancels the body on every path.
 */
export async function streamAttempt(
  context: AttemptContext,
  body: string,
  signal: AbortSignal | undefined,
  onDelta: ((text: string) => void) | undefined,
): Promise<Attempt> {
  const { failures } = context;
  const deadline = new AbortController();
  const expire = (seconds: number) => setTimeout(() => deadline.abort(timeoutError()), seconds * 1000);
  let timer = expire(context.timeoutSeconds);
  const combined = signal === undefined ? deadline.signal : AbortSignal.any([signal, deadline.signal]);
  let reader: ReadableStreamDefaultReader<Uint8Array> | undefined;
  try {
    let response: Response;
    let text: string | undefined;
    try {
      response = await post(context, body, combined, true);
      if (!response.ok || response.body === null || isJsonResponse(response)) text = await response.text();
    } catch (error) {
      return { ok: false, failure: failures.thrown(error, signal, deadline.signal) };
    }
    if (!response.ok) return { ok: false, failure: failures.http(response, text ?? "") };
    if (text !== undefined || response.body === null) {
      // A server that ignores `stream: true` sends one whole completion.
      const outcome = failures.parse(text ?? "");
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
          ? failures.thrown(error, signal, deadline.signal)
          : failures.brokenStream(error, signal, deadline.signal, bytes);
        return { ok: false, failure };
      }
      if (!chunk.done && chunk.value.byteLength > 0) {
        bytes += chunk.value.byteLength;
        clearTimeout(timer);
        timer = expire(context.idleTimeoutSeconds);
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
    clearTimeout(timer);
    // Frees the connection when the stream stops early ([DONE], an error); a no-op on a finished body.
    await reader?.cancel().catch(() => {});
  }
}
