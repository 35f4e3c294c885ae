/**
 * `POST /v1/chat/completions`: one agent turn (the whole tool loop, tools run here) answered as OpenAI's
 * `chat.completion`, or with `stream: true` as `chat.completion.chunk` events ending in `data: [DONE]`. With a
 * session id the turn continues that stored session; without, the client's messages are the history of a
 * private session kept nowhere, gone once the request is (its events still reach the trace).
 * @module
 */
import { readJsonBody } from "./body.ts";
import type { HandlerDeps } from "./deps.ts";
import { type HttpError, toHttpError } from "./errors.ts";
import { answerMarked, idempotencyKey } from "./idempotency_key.ts";
import { type ChatRequest, parseChatRequest } from "./openai_request.ts";
import {
  chunkBody,
  completionBody,
  type CompletionIds,
  finishReason,
  openaiErrorBody,
  usageChunk,
} from "./openai_shape.ts";
import {
  noAnswer,
  type Prepared,
  prepareEphemeral,
  prepareKept,
  runSaying,
  waitingFor,
} from "./openai_turn.ts";
import { sseResponse, type SseSend } from "./sse.ts";

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
  const marked = { request, key, userId, sessionId: chat.sessionId, body };
  return await answerMarked(marked, deps, (didWork) => answer(request, userId, chat, deps, didWork));
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

function idsOf(runId: string, created: number): CompletionIds {
  return { id: `chatcmpl-${runId}`, created };
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
