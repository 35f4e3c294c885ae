/**
 * `POST /v1/sessions/{id}/messages`: one user turn through the same `runTurn` the REPL uses, answered as JSON
 * or, with `Accept: text/event-stream`, as Server-Sent Events — one SSE event per run event, from the same
 * event stream the trace is written from, plus `delta` events (`{"text"}`) while the answer streams.
 * @module
 */
import { runTurn, unansweredMessage, usageData } from "../loop.ts";
import type { SessionKey } from "../store.ts";
import type { RunEvent, TurnResult } from "../types.ts";
import { readMessageField } from "./body.ts";
import { HttpError } from "./errors.ts";
import type { HandlerDeps } from "./handler.ts";

/** The JSON a finished turn is answered with. */
export function turnBody(result: TurnResult): Record<string, unknown> {
  return {
    session_id: result.sessionId,
    run_id: result.runId,
    turn: result.turn,
    outcome: result.outcome,
    answer: result.answer,
    tool_calls: result.toolCalls,
    usage: usageData(result.usage),
  };
}

/** The session's key in the `SessionQueue`: per user, like the session. NUL cannot occur in an id. */
export function queueKey(key: SessionKey): string {
  return `${key.userId}\u0000${key.sessionId}`;
}

/** One SSE frame. `data` is one line of JSON, so no event can break the framing. */
export function sseFrame(event: string, data: unknown): string {
  return `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
}

function wantsEventStream(request: Request): boolean {
  return (request.headers.get("accept") ?? "").toLowerCase().includes("text/event-stream");
}

/** The status for a turn that ended in `error`: 504 for a model timeout, 502 for any other model failure. */
function failureStatus(kind: unknown): 502 | 504 {
  return kind === "timeout" ? 504 : 502;
}

/** Options of {@linkcode handleTurn}. */
export interface HandleTurnOptions {
  /**
   * Rerun the session's last unanswered message instead of reading a new one from the body (the body, if
   * any, is not read). 409 `nothing_to_retry` when the last turn was answered.
   * @default {false}
   */
  retry?: boolean;
}

/**
 * Handles one turn for `userId` on its session `sessionId` (created if new). Everything that can reject the
 * request (body, nothing to retry, a full queue) is checked before anything is written, so a rejected request
 * changes nothing.
 */
export async function handleTurn(
  request: Request,
  sessionId: string,
  userId: string,
  deps: HandlerDeps,
  options: HandleTurnOptions = {},
): Promise<Response> {
  const { retry = false } = options;
  const message = retry
    ? undefined
    : await readMessageField(request, { maxBytes: deps.maxBodyBytes, signal: request.signal });
  const key = { userId, sessionId };
  if (retry && (deps.store.get(key) === null || unansweredMessage(deps.store.messages(key)) === null)) {
    throw new HttpError(
      409,
      "nothing_to_retry",
      `Cannot retry: session "${sessionId}" has no unanswered message (its last turn was answered)`,
    );
  }
  const queued = queueKey(key);
  // Checked before streaming starts: an SSE response cannot change its status later.
  const full = deps.queue.rejection(queued);
  if (full !== null) throw full;
  const signal = AbortSignal.any([request.signal, deps.shutdownSignal]);
  const run = (emit: (event: RunEvent) => void, onDelta?: (text: string) => void) =>
    deps.queue.run(
      queued,
      () => runTurn({ sessionId, userId, message, retry }, { ...deps.turn, emit, signal, onDelta }),
      { signal },
    );

  if (!wantsEventStream(request)) {
    let errorKind: unknown = null;
    const result = await run((event) => {
      deps.emit(event);
      if (event.event === "error") errorKind = event.data.kind;
    });
    if (result.outcome === "error") {
      const status = failureStatus(errorKind);
      const code = status === 504 ? "llm_timeout" : "llm_error";
      return Response.json({ error: { code, message: result.answer, run_id: result.runId } }, { status });
    }
    return Response.json(turnBody(result));
  }

  const encoder = new TextEncoder();
  let controller!: ReadableStreamDefaultController<Uint8Array>;
  let open = true;
  const send = (event: string, data: unknown) => {
    if (open) controller.enqueue(encoder.encode(sseFrame(event, data)));
  };
  const stream = new ReadableStream<Uint8Array>({
    start(c) {
      controller = c;
    },
    cancel() {
      // The client went away; request.signal aborts the turn (a write to the closed stream makes Deno see it
      // even when the request's body came after its headers).
      open = false;
    },
  });
  run(
    (event) => {
      deps.emit(event);
      send(event.event, event);
    },
    // Deltas are a live view for this client only: never traced, the answer event holds the full text.
    (text) => send("delta", { text }),
  ).then(
    () => {},
    (error) => {
      // A client gone while waiting is routine (the JSON path answers it 499 without a log line).
      if (error instanceof DOMException && error.name === "AbortError") return;
      const known = error instanceof HttpError;
      if (!known) deps.log(`error: turn on ${sessionId} failed: ${String(error)}`);
      send("error", {
        error: {
          code: known ? error.code : "internal",
          message: known ? error.message : "internal error",
          status: known ? error.status : 500,
        },
      });
    },
  ).finally(() => {
    if (!open) return;
    open = false;
    controller.close();
  });
  return new Response(stream, {
    headers: {
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-cache",
      "x-accel-buffering": "no",
    },
  });
}
