/**
 * `POST /v1/sessions/{id}/messages` and `/retry`: one user turn through the same `runTurn` the REPL uses,
 * answered as JSON or, with `Accept: text/event-stream`, as Server-Sent Events: one SSE event per run event
 * (the stream the trace is written from), plus `delta` events (`{"text"}`) while the answer streams.
 * @module
 */
import { type Agent, runTurn, type TurnInput } from "../agent/loop.ts";
import { approvalPending, nothingToRetry, unansweredMessage, usageData } from "../agent/agent.ts";
import type { SessionKey } from "../store/store.ts";
import type { EventSink } from "../events.ts";
import type { TurnResult } from "../types.ts";
import { readMessageField } from "./body.ts";
import type { HandlerDeps } from "./deps.ts";
import { failedTurn, type HttpError, toHttpError } from "./errors.ts";
import { sseResponse, type SseSend } from "./sse.ts";
import { checkDailyQuota } from "./quota.ts";

/** Runs a prepared turn, reporting to `emit` and, as the answer streams, to `onDelta`. */
export type QueuedTurn = (
  emit: EventSink,
  onDelta?: (text: string, step: number) => void,
) => Promise<TurnResult>;

/**
 * `input` (a new message, a retry or decisions on a waiting turn) ready to run on `agent` through the
 * session runner: first in its session's queue, then under its lease (unless `agent` has a private store,
 * whose session is this request's alone); aborted when the client disconnects or the shutdown grace period
 * ends. Throws the user's spent daily quota (429 `quota_exceeded`) or the queue's refusal now, while the
 * response can still carry its status.
 */
export async function queueTurn(
  request: Request,
  input: TurnInput,
  deps: HandlerDeps,
  agent: Agent = deps.agent,
): Promise<QueuedTurn> {
  const key = { userId: input.userId, sessionId: input.sessionId };
  const leased = agent.store === deps.agent.store;
  const now = (deps.agent.now ?? (() => new Date()))();
  await checkDailyQuota(deps.agent.store, input.userId, deps.dailyTokens ?? null, now);
  const full = deps.sessions.rejection(key);
  if (full !== null) throw full;
  const signal = AbortSignal.any([request.signal, deps.shutdownSignal]);
  return (emit, onDelta) => {
    const work = (held: AbortSignal) => runTurn(input, agent, { emit, signal: held, onDelta });
    return deps.sessions.run(key, work, { signal, leased });
  };
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
  // Before the body is read: a session whose turn waits for approval takes no new turn.
  if (await deps.agent.store.pendingStep(key) !== null) throw approvalPending(key.sessionId);
  const message = retry
    ? undefined
    : await readMessageField(request, { maxBytes: deps.maxBodyBytes, signal: request.signal });
  // Checked here too, before an SSE response starts: the 409 cannot come once it streams.
  if (retry && unansweredMessage(await deps.agent.store.messages(key)) === null) {
    throw nothingToRetry(key.sessionId);
  }
  const run = await queueTurn(request, { ...key, message, retry }, deps);
  return await respondTurn(request, run, deps);
}

/**
 * The response of a queued turn: JSON once it ends (with `approval` when it waits for one), or with
 * `Accept: text/event-stream` one SSE frame per run event as it happens.
 */
export async function respondTurn(request: Request, run: QueuedTurn, deps: HandlerDeps): Promise<Response> {
  if (!(request.headers.get("accept") ?? "").toLowerCase().includes("text/event-stream")) {
    const result = await run(deps.emit);
    if (result.failure !== undefined) throw failedTurn(result);
    const { sessionId: session_id, runId: run_id, turn, outcome, answer, toolCalls: tool_calls } = result;
    const usage = usageData(result.usage);
    const approval = result.approval === undefined ? {} : { approval: result.approval };
    return Response.json({ session_id, run_id, turn, outcome, answer, tool_calls, usage, ...approval });
  }

  // One frame per run event; deltas are a live view for this client only: never traced, the answer event
  // holds the full text. A turn without an answer ends with the error frame of the status JSON would have.
  const frame = (error: HttpError, send: SseSend) => {
    // A client gone is routine: no frame, nobody reads it.
    if (error.status !== 499) {
      send(JSON.stringify({ error: { ...error.body(), status: error.status } }), "error");
    }
  };
  return sseResponse(async (send) => {
    const result = await run((event) => {
      deps.emit(event);
      send(JSON.stringify(event), event.event);
    }, (text) => send(JSON.stringify({ text }), "delta"));
    if (result.failure !== undefined) frame(failedTurn(result), send);
  }, (error, send) => frame(toHttpError(error, deps.log, "internal error"), send));
}
