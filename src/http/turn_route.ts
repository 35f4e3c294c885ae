/**
 * `POST /v1/sessions/{id}/messages`, `/retry` and `/approvals` (the user's decisions on the calls a paused
 * turn waits for, which resume the same run): one user turn through the same `runTurn` the REPL uses,
 * answered as JSON or, with `Accept: text/event-stream`, as Server-Sent Events: one SSE event per run event
 * (the stream the trace is written from), plus `delta` events (`{"text"}`) while the answer streams and, with
 * AGENT_SHOW_THINKING, a `reasoning` event (`{"step"}`) when a step's reasoning starts to stream.
 * @module
 */
import { usageData } from "../agent/agent.ts";
import type { Decision } from "../approval/decisions.ts";
import type { SessionKey } from "../store/store.ts";
import type { ResponseFormat } from "../types.ts";
import { bodyWith, messageField, readJsonBody } from "./body.ts";
import { parseResponseFormat } from "../agent/response_format.ts";
import { ResponseFormatError } from "../errors.ts";
import { isRecord } from "../_json.ts";
import type { HandlerDeps } from "./deps.ts";
import { failedTurn, HttpError, toHttpError } from "./errors.ts";
import { RunEventIds } from "./run_events.ts";
import { sendErrorFrame, sseResponse } from "./sse.ts";
import { type QueuedTurn, queueTurn } from "../session/turn.ts";

/**
 * Whether `request` asks for a turn that outlives its connection: an SSE request with `Prefer: resumable`
 * (RFC 7240), so the client can follow the run again from `GET …/runs/{run_id}/events`.
 */
function resumable(request: Request): boolean {
  return acceptsSse(request) && /(^|,)\s*resumable\s*(;|,|$)/i.test(request.headers.get("prefer") ?? "");
}

function acceptsSse(request: Request): boolean {
  return (request.headers.get("accept") ?? "").toLowerCase().includes("text/event-stream");
}

/** Options of {@linkcode handleTurn}. */
export interface HandleTurnOptions {
  /** Rerun the session's last unanswered message; the body is not read. @default {false} */
  retry?: boolean;
  /**
   * Resume the turn of the session that waits for approval with the body's `decisions`; the session layer
   * checks that a turn waits (409 `no_pending_approval`) and that they name exactly its waiting calls (400
   * `invalid_body`). @default {false}
   */
  decisions?: boolean;
}

/**
 * Handles one turn on `key` (created if new; with `retry` or `decisions` the route has checked it exists): the
 * body's `message`, and its `response_format` when it asks for structured output, or its `decisions`.
 * Whatever can reject the request (the body, then in the session layer a turn waiting for approval, nothing
 * to retry, no turn waiting, decisions that do not match, a full queue) is checked before anything is written
 * or a stream starts.
 */
export async function handleTurn(
  request: Request,
  key: SessionKey,
  deps: HandlerDeps,
  options: HandleTurnOptions = {},
): Promise<Response> {
  const { retry = false, decisions = false } = options;
  const body = retry ? undefined : await readJsonBody(request, { maxBytes: deps.maxBodyBytes });
  const asked = decisions
    ? { decisions: bodyWith(body, "decisions", "Cannot resume").decisions as Record<string, Decision> }
    : { message: retry ? undefined : messageField(body), retry, responseFormat: responseFormatField(body) };
  const run = await queueTurn(request.signal, { ...key, ...asked }, deps, { resumable: resumable(request) });
  return await respondTurn(request, run, deps);
}

/** The body's `response_format` (see `parseResponseFormat`), or null; a 400 `invalid_body` saying what is wrong. */
function responseFormatField(body: unknown): ResponseFormat | null {
  try {
    return parseResponseFormat(isRecord(body) ? body.response_format : undefined);
  } catch (error) {
    if (!(error instanceof ResponseFormatError)) throw error;
    throw new HttpError(400, "invalid_body", `Cannot read response_format: ${error.message}`);
  }
}

/**
 * The response of a queued turn: JSON once it ends (with `approval` when it waits for one), or with
 * `Accept: text/event-stream` one SSE frame per run event as it happens, each with its id
 * ({@linkcode RunEventIds}), the run's id in `X-Run-Id`.
 */
async function respondTurn(request: Request, run: QueuedTurn, deps: HandlerDeps): Promise<Response> {
  if (!acceptsSse(request)) {
    const result = await run(deps.emit);
    if (result.failure !== undefined) throw failedTurn(result);
    const { sessionId: session_id, runId: run_id, turn, outcome, answer, toolCalls: tool_calls } = result;
    const usage = usageData(result.usage);
    const approval = result.approval === undefined ? {} : { approval: result.approval };
    return Response.json({ session_id, run_id, turn, outcome, answer, tool_calls, usage, ...approval });
  }

  // One frame per run event; deltas are a live view for this client only: never traced, the answer event
  // holds the full text. A turn without an answer ends with the error frame of the status JSON would have.
  const headers: Record<string, string> = { "x-run-id": run.runId };
  if (resumable(request)) headers["preference-applied"] = "resumable";
  return sseResponse(
    async (send) => {
      const ids = new RunEventIds();
      // Said once per step: the page shows "reasoning…" until the step's text or tool calls come.
      let reasoning: number | null = null;
      const result = await run((event) => {
        deps.emit(event);
        send(JSON.stringify(event), event.event, ids.next(event) ?? undefined);
      }, {
        onDelta: (text) => send(JSON.stringify({ text }), "delta"),
        onReasoning: (step) => {
          if (reasoning === step) return;
          reasoning = step;
          send(JSON.stringify({ step }), "reasoning");
        },
      });
      if (result.failure !== undefined) sendErrorFrame(failedTurn(result), send);
    },
    (error, send) => sendErrorFrame(toHttpError(error, deps.log, "internal error"), send),
    headers,
  );
}
