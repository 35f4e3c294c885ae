/**
 * `POST /v1/chat/completions`: one agent turn (the whole tool loop, tools run here) answered as OpenAI's
 * `chat.completion`, or with `stream: true` as `chat.completion.chunk` events ending in `data: [DONE]`. With a
 * session id the turn continues that stored session; without, the client's messages are the history of a
 * private session kept nowhere, gone once the request is (its events still reach the trace).
 * @module
 */
import type { TurnInput } from "../agent/loop.ts";
import { BackgroundCompactions } from "../session/background.ts";
import { askAsDeny, AUTO_POLICY } from "../approval/policy.ts";
import type { RunEvent } from "../events.ts";
import type { SessionKey } from "../store/store.ts";
import type { TurnResult } from "../types.ts";
import { readJsonBody } from "./body.ts";
import type { HandlerDeps } from "./deps.ts";
import { failedTurn, HttpError, toHttpError } from "./errors.ts";
import { answerOnce, idempotencyKey, requestHash } from "./idempotency_key.ts";
import { type ChatRequest, parseChatRequest } from "./openai_request.ts";
import {
  chunkBody,
  completionBody,
  type CompletionIds,
  finishReason,
  openaiErrorBody,
  usageChunk,
} from "./openai_shape.ts";
import { sseResponse, type SseSend } from "./sse.ts";
import { type QueuedTurn, queueTurn } from "../session/turn.ts";
import { requestSession } from "../session/request_session.ts";
import { RequestTodos } from "../tools/todo.ts";

/**
 * A turn ready to run, whether it keeps a session (the advice of a failure depends on it), and what learns
 * that it did work a repeat must not do again (it ended, and its session was not taken back).
 */
interface Prepared {
  run: QueuedTurn;
  kept: boolean;
  didWork?: () => void;
}

/**
 * Answers one Chat Completions request of `userId`. Everything that can reject it (body, parameters, a full
 * queue) is checked before a stream starts; see {@linkcode parseChatRequest} for the 400s and the 404. With an
 * `Idempotency-Key`, a repeat of the request gets the first one's response (see `idempotency_key.ts`).
 */
export async function handleChatCompletion(
  request: Request,
  userId: string,
  deps: HandlerDeps,
): Promise<Response> {
  const key = idempotencyKey(request.headers);
  const body = await readJsonBody(request, { maxBytes: deps.maxBodyBytes });
  const chat = parseChatRequest(body, request.headers);
  if (key === null) return await answer(request, userId, chat, deps);
  const hash = await requestHash(new URL(request.url).pathname, chat.sessionId, body);
  const { turnTimeoutSeconds } = deps.agent;
  const once = { store: deps.store, key: { userId, key }, hash, log: deps.log, turnTimeoutSeconds };
  return await answerOnce(once, (didWork) => answer(request, userId, chat, deps, didWork));
}

async function answer(
  request: Request,
  userId: string,
  chat: ChatRequest,
  deps: HandlerDeps,
  didWork?: () => void,
): Promise<Response> {
  const created = Math.floor((deps.agent.now ?? (() => new Date()))().getTime() / 1000);
  const prepared = chat.sessionId === null
    ? await prepareEphemeral(request, userId, chat, deps)
    : await prepareKept(request, { userId, sessionId: chat.sessionId }, chat, deps);
  prepared.didWork = didWork;
  return chat.stream
    ? streamAnswer(prepared, chat.includeUsage, created, deps)
    : await jsonAnswer(prepared, created, deps);
}

/**
 * The next turn of a stored session: the last message is the question, the stored history the context. When
 * the session's last question went unanswered (a model failure) and the client sends it again, as the
 * openai client does on a 5xx, the turn is retried rather than asked twice.
 */
async function prepareKept(
  request: Request,
  key: SessionKey,
  chat: ChatRequest,
  deps: HandlerDeps,
): Promise<Prepared> {
  const { question: message, instructions, responseFormat } = chat;
  const input: TurnInput = { ...key, message, instructions, responseFormat };
  return { run: await queueTurn(request.signal, input, deps, { retryIfResent: true }), kept: true };
}

/**
 * A turn on a private session of the client's messages, kept nowhere (`request_session.ts`), its todos in
 * memory: nothing of it outlives the request but the tokens it spent (counted for the user) and its events.
 */
async function prepareEphemeral(
  request: Request,
  userId: string,
  chat: ChatRequest,
  deps: HandlerDeps,
): Promise<Prepared> {
  const now = deps.agent.now ?? (() => new Date());
  const newId = deps.agent.newId ?? (() => crypto.randomUUID());
  const key = { userId, sessionId: `ephemeral-${newId()}` };
  const session = requestSession(key, chat.history, { usage: deps.store, now });
  const { question: message, instructions, responseFormat } = chat;
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

function idsOf(runId: string, created: number): CompletionIds {
  return { id: `chatcmpl-${runId}`, created };
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
function noAnswer(result: TurnResult, kept: boolean): HttpError {
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
 * the run's id when it starts. Both forms of the answer say this same text.
 */
async function runSaying(
  prepared: Prepared,
  deps: HandlerDeps,
  write: (content: string) => void,
  onStart: (runId: string) => void = () => {},
): Promise<TurnResult> {
  const text = streamedText(write);
  const emit = (event: RunEvent) => {
    deps.emit(event);
    if (event.event === "run_start") onStart(event.run_id);
    else if (event.event === "answer") text.answer(event.data.text, event.step!);
  };
  const result = await prepared.run(emit, { onDelta: (piece, step) => text.delta(piece, step) });
  if (!NOTHING_KEPT.has(result.failure?.kind ?? "")) prepared.didWork?.();
  // A turn that waits for approval has no answer event: what it says is the result's.
  if (result.outcome === "awaiting_approval") text.answer(result.answer, -1);
  return result;
}

async function jsonAnswer(prepared: Prepared, created: number, deps: HandlerDeps): Promise<Response> {
  let content = "";
  const result = await runSaying(prepared, deps, (piece) => content += piece);
  if (result.failure !== undefined) throw noAnswer(result, prepared.kept);
  const ids = idsOf(result.runId, created);
  const body = completionBody(ids, content, finishReason(result.outcome), result.usage);
  return Response.json({ ...body, ...waitingFor(result) });
}

/**
 * What marks a turn that waits for approval, beside its `stop` and the text that says so: the field
 * `awaiting_approval` with the session and the waiting calls (`{id, name, arguments}`), for a client that
 * decides through `POST /v1/sessions/{id}/approvals`. Nothing for any other turn.
 */
function waitingFor(result: TurnResult): Record<string, unknown> {
  if (result.outcome !== "awaiting_approval") return {};
  return { awaiting_approval: { session_id: result.sessionId, calls: result.approval?.calls ?? [] } };
}

/**
 * The turn as chunks: the role when the run starts, the answer's text as it streams (text the model wrote
 * before calling tools too, each step's set apart by a blank line, as the JSON answer has it), then the finish
 * reason, the usage chunk if asked for, and `[DONE]`. A failure after the start is a `data: {"error": …}`
 * frame, and no `[DONE]`.
 */
function streamAnswer(
  prepared: Prepared,
  includeUsage: boolean,
  created: number,
  deps: HandlerDeps,
): Response {
  return sseResponse(async (send) => {
    const json = (value: unknown) => send(JSON.stringify(value));
    let ids = idsOf("", created);
    const result = await runSaying(
      prepared,
      deps,
      (content) => json(chunkBody(ids, { content }, null, includeUsage)),
      (runId) => {
        ids = idsOf(runId, created);
        json(chunkBody(ids, { role: "assistant", content: "" }, null, includeUsage));
      },
    );
    if (result.failure !== undefined) return sendError(noAnswer(result, prepared.kept), send);
    json({ ...chunkBody(ids, {}, finishReason(result.outcome), includeUsage), ...waitingFor(result) });
    if (includeUsage) json(usageChunk(ids, result.usage));
    send("[DONE]");
  }, (error, send) => sendError(toHttpError(error, deps.log, "internal error"), send));
}

function sendError(error: HttpError, send: SseSend): void {
  // A client gone is routine: nobody reads a frame.
  if (error.status !== 499) send(JSON.stringify(openaiErrorBody(error)));
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
