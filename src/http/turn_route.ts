/**
 * `POST /v1/sessions/{id}/messages` and `/retry`: one user turn through the same `runTurn` the REPL uses,
 * answered as JSON or, with `Accept: text/event-stream`, as Server-Sent Events: one SSE event per run event
 * (the stream the trace is written from), plus `delta` events (`{"text"}`) while the answer streams.
 * @module
 */
import { type Agent, type RunOptions, runTurn, type TurnInput } from "../agent/loop.ts";
import { approvalPending, nothingToRetry, unansweredMessage, usageData } from "../agent/agent.ts";
import { LeaseLostError } from "../errors.ts";
import type { SessionKey } from "../store/store.ts";
import type { EventSink } from "../events.ts";
import type { TurnResult } from "../types.ts";
import { readMessageField } from "./body.ts";
import type { HandlerDeps } from "./deps.ts";
import { HttpError, storeUnavailable, toHttpError } from "./errors.ts";
import { sseResponse } from "./sse.ts";

/** The session's key in the `SessionQueue`: per user, like the session. NUL cannot occur in an id. */
export function queueKey(key: SessionKey): string {
  return `${key.userId}\u0000${key.sessionId}`;
}

/** Runs a prepared turn, reporting to `emit` and, as the answer streams, to `onDelta`. */
export type QueuedTurn = (
  emit: EventSink,
  onDelta?: (text: string, step: number) => void,
) => Promise<TurnResult>;

/**
 * `input` ready to run on `agent` through its session's queue, aborted when the client disconnects or the
 * shutdown grace period ends. Throws the queue's 429 now, while the response can still carry that status.
 */
export function queueTurn(
  request: Request,
  input: TurnInput,
  deps: HandlerDeps,
  agent: Agent = deps.agent,
): QueuedTurn {
  // A private store's session is this request's alone: it needs no lease.
  const leased = agent.store === deps.agent.store;
  return queueRun(request, input, deps, (run) => runTurn(input, agent, run), { leased });
}

/** Options of {@linkcode queueRun}. */
export interface QueueRunOptions {
  /** Run under the session's lease (when the server has leases). @default {true} */
  leased?: boolean;
}

/**
 * `start` (a turn or its resumption on `key`) ready to run as {@linkcode queueTurn} runs a turn: first in
 * the session's queue, then under its lease. A turn aborted because the lease was lost is a 503.
 */
export function queueRun(
  request: Request,
  key: SessionKey,
  deps: HandlerDeps,
  start: (run: RunOptions) => Promise<TurnResult>,
  options: QueueRunOptions = {},
): QueuedTurn {
  const { leased = true } = options;
  const queued = queueKey(key);
  const full = deps.queue.rejection(queued);
  if (full !== null) throw full;
  const signal = AbortSignal.any([request.signal, deps.shutdownSignal]);
  return (emit, onDelta) => {
    const work = async (held: AbortSignal) => {
      const result = await start({ emit, signal: held, onDelta });
      if (result.outcome === "aborted" && held.reason instanceof LeaseLostError) {
        throw leaseLost(key.sessionId, result.runId, held.reason);
      }
      return result;
    };
    const task = () => leased ? underLease(key, deps, signal, work) : work(signal);
    return deps.queue.run(queued, task, { signal });
  };
}

/**
 * Runs `work` under the session's lease when the server has leases (waiting while another process holds it),
 * else at once; its signal is `signal`, aborted too if the lease is lost.
 */
export function underLease<T>(
  key: SessionKey,
  deps: HandlerDeps,
  signal: AbortSignal,
  work: (signal: AbortSignal) => Promise<T>,
): Promise<T> {
  return deps.leases === undefined ? work(signal) : deps.leases.hold(key, work, { signal });
}

/** The 503 of a turn aborted because its server lost the session's lease: nothing of it was kept. */
function leaseLost(sessionId: string, runId: string, cause: LeaseLostError): HttpError {
  const message = `Cannot finish the turn: this server lost the lease of session "${sessionId}" ` +
    "(it stalled past AGENT_SESSION_LEASE_SECONDS); nothing of the turn was kept, send it again";
  return new HttpError(503, "session_lease_lost", message, {
    details: { run_id: runId },
    headers: { "Retry-After": "1" },
    cause,
  });
}

/** A turn that ended in a model failure: 504 `llm_timeout` for a timeout, else 502 `llm_error`, with its run id. */
export function modelFailure(timedOut: boolean, message: string, runId: string): HttpError {
  return new HttpError(timedOut ? 504 : 502, timedOut ? "llm_timeout" : "llm_error", message, {
    details: { run_id: runId },
    headers: { "content-type": "application/json" },
  });
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
  const run = queueTurn(request, { ...key, message, retry }, deps);
  return await respondTurn(request, run, deps);
}

/**
 * The response of a queued turn: JSON once it ends (with `approval` when it waits for one), or with
 * `Accept: text/event-stream` one SSE frame per run event as it happens.
 */
export async function respondTurn(request: Request, run: QueuedTurn, deps: HandlerDeps): Promise<Response> {
  if (!(request.headers.get("accept") ?? "").toLowerCase().includes("text/event-stream")) {
    let timedOut = false;
    let storeDown = false;
    const result = await run((event) => {
      deps.emit(event);
      if (event.event === "error") timedOut = event.data.kind === "timeout";
      if (event.event === "error") storeDown = event.data.kind === "store";
    });
    if (result.outcome !== "error") {
      const { sessionId: session_id, runId: run_id, turn, outcome, answer, toolCalls: tool_calls } = result;
      const usage = usageData(result.usage);
      const approval = result.approval === undefined ? {} : { approval: result.approval };
      return Response.json({ session_id, run_id, turn, outcome, answer, tool_calls, usage, ...approval });
    }
    if (storeDown) throw storeUnavailable(result.answer, { details: { run_id: result.runId } });
    // A model failure. Plain `application/json`, as it always was.
    throw modelFailure(timedOut, result.answer, result.runId);
  }

  // One frame per run event; deltas are a live view for this client only: never traced, the answer event
  // holds the full text.
  return sseResponse(async (send) => {
    await run((event) => {
      deps.emit(event);
      send(JSON.stringify(event), event.event);
    }, (text) => send(JSON.stringify({ text }), "delta"));
  }, (error, send) => {
    const failure = toHttpError(error, deps.log, "internal error");
    // A client gone while waiting is routine: no frame, nobody reads it.
    if (failure.status !== 499) {
      send(JSON.stringify({ error: { ...failure.body(), status: failure.status } }), "error");
    }
  });
}
