/**
 * `POST /v1/sessions/{id}/messages` and `/retry`: one user turn through the same `runTurn` the REPL uses,
 * answered as JSON or, with `Accept: text/event-stream`, as Server-Sent Events: one SSE event per run event
 * (the stream the trace is written from), plus `delta` events (`{"text"}`) while the answer streams.
 * @module
 */
import { runTurn } from "../agent/loop.ts";
import { nothingToRetry, unansweredMessage, usageData } from "../agent/turn.ts";
import type { SessionKey } from "../store/store.ts";
import type { RunEvent } from "../events.ts";
import { readMessageField } from "./body.ts";
import type { HandlerDeps } from "./deps.ts";
import { HttpError, toHttpError } from "./errors.ts";

/** The session's key in the `SessionQueue`: per user, like the session. NUL cannot occur in an id. */
export function queueKey(key: SessionKey): string {
  return `${key.userId}\u0000${key.sessionId}`;
}

/** Options of {@linkcode handleTurn}. */
export interface HandleTurnOptions {
  /** Rerun the session's last unanswered message; the body is not read. @default {false} */
  retry?: boolean;
}

/**
 * Handles one turn on `key` (created if new; with `retry` the route has checked it exists). Whatever can
 * reject the request (body, nothing to retry, a full queue) is checked before anything is written.
 */
export async function handleTurn(
  request: Request,
  key: SessionKey,
  deps: HandlerDeps,
  options: HandleTurnOptions = {},
): Promise<Response> {
  const { retry = false } = options;
  const message = retry
    ? undefined
    : await readMessageField(request, { maxBytes: deps.maxBodyBytes, signal: request.signal });
  // Checked here too, before an SSE response starts: the 409 cannot come once it streams.
  if (retry && unansweredMessage(await deps.agent.store.messages(key)) === null) {
    throw nothingToRetry(key.sessionId);
  }
  const queued = queueKey(key);
  // Checked before streaming starts: an SSE response cannot change its status later.
  const full = deps.queue.rejection(queued);
  if (full !== null) throw full;
  const signal = AbortSignal.any([request.signal, deps.shutdownSignal]);
  const input = { ...key, message, retry };
  const run = (emit: (event: RunEvent) => void, onDelta?: (text: string) => void) =>
    deps.queue.run(queued, () => runTurn(input, deps.agent, { emit, signal, onDelta }), { signal });

  if (!(request.headers.get("accept") ?? "").toLowerCase().includes("text/event-stream")) {
    let timedOut = false;
    const result = await run((event) => {
      deps.emit(event);
      if (event.event === "error") timedOut = event.data.kind === "timeout";
    });
    if (result.outcome !== "error") {
      const { sessionId: session_id, runId: run_id, turn, outcome, answer, toolCalls: tool_calls } = result;
      const usage = usageData(result.usage);
      return Response.json({ session_id, run_id, turn, outcome, answer, tool_calls, usage });
    }
    // A model failure: 504 for a timeout, 502 otherwise. Plain `application/json`, as it always was.
    throw new HttpError(timedOut ? 504 : 502, timedOut ? "llm_timeout" : "llm_error", result.answer, {
      details: { run_id: result.runId },
      headers: { "content-type": "application/json" },
    });
  }

  const encoder = new TextEncoder();
  let open = true;
  const stream = new ReadableStream<Uint8Array>({
    start(controller) {
      // One frame per event; `data` is one line of JSON, so no event can break the framing.
      const send = (event: string, data: unknown) => {
        if (open) controller.enqueue(encoder.encode(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`));
      };
      const emit = (event: RunEvent) => {
        deps.emit(event);
        send(event.event, event);
      };
      // Deltas are a live view for this client only: never traced, the answer event holds the full text.
      run(emit, (text) => send("delta", { text })).catch((error) => {
        const failure = toHttpError(error, deps.log, "internal error");
        // A client gone while waiting is routine: no frame, nobody reads it.
        if (failure.status !== 499) send("error", { error: { ...failure.body(), status: failure.status } });
      }).finally(() => {
        if (open) controller.close();
        open = false;
      });
    },
    cancel() {
      // The client went away; request.signal aborts the turn (a write to the closed stream makes Deno see it
      // even when the request's body came after its headers).
      open = false;
    },
  });
  const headers = {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-cache",
    "x-accel-buffering": "no",
  };
  return new Response(stream, { headers });
}
