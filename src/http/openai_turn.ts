/**
 * The turn of an OpenAI-compatible route (`/v1/chat/completions`, `/v1/responses`): prepared on a kept session
 * or on a private one kept nowhere, run saying its text as it comes (each step's set apart), and a turn
 * without an answer worded as the error an API client gets. Each route writes the result in its own shapes.
 * @module
 */
import type { TurnInput } from "../agent/loop.ts";
import { BackgroundCompactions } from "../session/background.ts";
import { askAsDeny, AUTO_POLICY } from "../approval/policy.ts";
import type { RunEvent } from "../events.ts";
import type { SessionKey } from "../store/store.ts";
import type { Message, ResponseFormat, TurnResult } from "../types.ts";
import type { HandlerDeps } from "./deps.ts";
import { failedTurn, HttpError } from "./errors.ts";
import { type QueuedTurn, queueTurn } from "../session/turn.ts";
import { requestSession } from "../session/request_session.ts";
import { RequestTodos } from "../tools/todo.ts";

/** What a client asks of one turn, whatever route it came by. */
export interface TurnAsk {
  /** The text of the last user message: the turn's question. */
  question: string;
  /** The user and assistant messages before it (a private session's history, a new session's first ones). */
  history: Message[];
  /** The client's system text (`[CLIENT INSTRUCTIONS]`), or null. */
  instructions: string | null;
  /** What the answer must be, or null: text. */
  responseFormat: ResponseFormat | null;
}

/**
 * A turn ready to run, whether it keeps a session (the advice of a failure depends on it), and what learns
 * that it did work a repeat must not do again (it ended, and its session was not taken back).
 */
export interface Prepared {
  run: QueuedTurn;
  kept: boolean;
  didWork?: () => void;
}

/** Options of {@linkcode prepareKept}. */
export interface PrepareKeptOptions {
  /**
   * The session is new, made for this request: `ask.history` is stored in it first, as its opening messages
   * (and the session deleted again when the turn is refused). @default {false} (the stored history is the
   * context; `ask.history` is not read)
   */
  fresh?: boolean;
}

/**
 * The next turn of a stored session: the question is new, the stored history the context. When the session's
 * last question went unanswered (a model failure) and the client sends it again, as the openai client does on
 * a 5xx, the turn is retried rather than asked twice.
 */
export async function prepareKept(
  request: Request,
  key: SessionKey,
  ask: TurnAsk,
  deps: HandlerDeps,
  options: PrepareKeptOptions = {},
): Promise<Prepared> {
  const { fresh = false } = options;
  const { question: message, instructions, responseFormat } = ask;
  const input: TurnInput = { ...key, message, instructions, responseFormat };
  if (!fresh || ask.history.length === 0) {
    return { run: await queueTurn(request.signal, input, deps, { retryIfResent: true }), kept: true };
  }
  const at = (deps.agent.now ?? (() => new Date()))().toISOString();
  const newId = deps.agent.newId ?? (() => crypto.randomUUID());
  await deps.store.getOrCreate(key);
  await deps.store.append(key, ask.history.map((m) => ({ ...m, id: newId(), createdAt: at })));
  try {
    return { run: await queueTurn(request.signal, input, deps), kept: true };
  } catch (error) {
    await deps.store.deleteSession(key).catch(() => {});
    throw error;
  }
}

/**
 * A turn on a private session of the client's messages, kept nowhere (`request_session.ts`), its todos in
 * memory: nothing of it outlives the request but the tokens it spent (counted for the user) and its events.
 */
export async function prepareEphemeral(
  request: Request,
  userId: string,
  ask: TurnAsk,
  deps: HandlerDeps,
): Promise<Prepared> {
  const now = deps.agent.now ?? (() => new Date());
  const newId = deps.agent.newId ?? (() => crypto.randomUUID());
  const key = { userId, sessionId: `ephemeral-${newId()}` };
  const session = requestSession(key, ask.history, { usage: deps.store, now });
  const { question: message, instructions, responseFormat } = ask;
  const input: TurnInput = { ...key, message, instructions, responseFormat };
  // The session is dropped after the turn: a compaction due by the turn trigger, which runs after the
  // answer, would only cost a model call. One due by the token budget still runs within the turn.
  const compactions = new BackgroundCompactions(deps.emit);
  await compactions.close();
  // Nobody can approve a call of a session dropped after the request: a tool that asks is refused.
  const approval = askAsDeny(deps.agent.approval ?? AUTO_POLICY);
  const tools = deps.requestTools(new RequestTodos(now));
  const agent = { ...deps.agent, tools, compactions, approval };
  return { run: await queueTurn(request.signal, input, deps, { agent, session }), kept: false };
}

/** Failures after which the session holds nothing of the turn (see `failureMessage`). */
const NOTHING_KEPT: ReadonlySet<string> = new Set(["aborted", "lease", "deadline"]);

/**
 * The error of a turn without an answer (see {@linkcode failedTurn}), a model or store failure worded for an
 * API client: the cause, how to retry (on a kept session, sending the same message again retries the turn).
 * The turn did work already (model calls, perhaps tools), which a client's own retry would do again: every
 * such error says `x-should-retry: false`, the header the official clients obey, and `turn_kept` says
 * whether the session holds the turn, so that sending the same message again continues it.
 */
export function noAnswer(result: TurnResult, kept: boolean): HttpError {
  const advice = kept ? "; send the same message again to retry the turn" : "";
  const cause = result.failure?.message ?? "unknown error";
  const kind = result.failure?.kind ?? "internal";
  const message = kind === "deadline"
    ? undefined
    : kind === "store"
    ? `The session database is unavailable: ${cause}${advice} (run ${result.runId})`
    : `The agent could not get an answer from its model: ${cause}${advice} (run ${result.runId})`;
  const error = failedTurn(result, message);
  return new HttpError(error.status, error.code, error.message, {
    headers: { ...error.headers, "x-should-retry": "false" },
    details: { ...error.details, turn_kept: kept && !NOTHING_KEPT.has(kind) },
    cause: error,
  });
}

/**
 * Runs the turn, writing what it says to `write` as it comes (see {@linkcode streamedText}); `onStart` gets
 * the run's id when it starts, `onEvent` each run event as it is emitted. Every form of the answer says this
 * same text.
 */
export async function runSaying(
  prepared: Prepared,
  deps: HandlerDeps,
  write: (content: string) => void,
  onStart: (runId: string) => void = () => {},
  onEvent: (event: RunEvent) => void = () => {},
): Promise<TurnResult> {
  const text = streamedText(write);
  const emit = (event: RunEvent) => {
    deps.emit(event);
    onEvent(event);
    if (event.event === "run_start") onStart(event.run_id);
    else if (event.event === "answer") text.answer(event.data.text, event.step!);
  };
  const result = await prepared.run(emit, { onDelta: (piece, step) => text.delta(piece, step) });
  if (!NOTHING_KEPT.has(result.failure?.kind ?? "")) prepared.didWork?.();
  // A turn that waits for approval has no answer event: what it says is the result's.
  if (result.outcome === "awaiting_approval") text.answer(result.answer, -1);
  return result;
}

/**
 * What marks a turn that waits for approval, beside the text that says so: the field `awaiting_approval` with
 * the session and the waiting calls (`{id, name, arguments}`), for a client that decides through
 * `POST /v1/sessions/{id}/approvals`. Nothing for any other turn.
 */
export function waitingFor(result: TurnResult): Record<string, unknown> {
  if (result.outcome !== "awaiting_approval") return {};
  return { awaiting_approval: { session_id: result.sessionId, calls: result.approval?.calls ?? [] } };
}

/**
 * Sends a turn's text as content: the deltas of each step, a blank line between steps, and at the answer
 * whatever of it did not stream (all of it from a model that does not stream, or a closing the runtime wrote).
 */
function streamedText(write: (content: string) => void) {
  let step: number | null | undefined; // Of the text last sent; null: a whole answer.
  let sent = ""; // Of that step.
  const put = (text: string, at: number | null) => {
    if (text === "") return;
    const apart = step !== undefined && at !== step;
    if (at !== step) sent = "";
    step = at;
    sent += text;
    write(apart ? `\n\n${text}` : text);
  };
  return {
    delta: put,
    answer(text: string, at: number) {
      if (step === at && text.startsWith(sent)) put(text.slice(sent.length), at);
      else put(text, null);
    },
  };
}
