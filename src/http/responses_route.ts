/**
 * `POST /v1/responses` (the Responses API, as the Vercel AI SDK's `openai` provider and Codex speak it): one
 * agent turn (the whole tool loop, tools run here) answered as a `response` object, or with `stream: true` as
 * its events; and `GET /v1/responses/{id}`, a kept response. The turn runs on a kept session: the one
 * `previous_response_id` was made on, the one a session id names, or a new one for the response's chain;
 * with `store: false` and neither, on a private session kept nowhere, as chat completions does.
 * @module
 */
import { SessionError } from "../errors.ts";
import type { KeptResponse, SessionKey } from "../store/store.ts";
import type { TurnResult } from "../types.ts";
import type { RunEvent } from "../events.ts";
import { readJsonBody } from "./body.ts";
import type { HandlerDeps } from "./deps.ts";
import { type HttpError, toHttpError } from "./errors.ts";
import { answerMarked, idempotencyKey } from "./idempotency_key.ts";
import { invalid } from "./openai_request.ts";
import { requestError } from "./openai_shape.ts";
import {
  noAnswer,
  type Prepared,
  prepareEphemeral,
  prepareKept,
  runSaying,
  waitingFor,
} from "./openai_turn.ts";
import {
  parseResponsesRequest,
  previousResponseNotFound,
  type ResponsesRequest,
} from "./responses_request.ts";
import {
  errorEvent,
  messageItem,
  responseBody,
  type ResponseEcho,
  responseEvents,
  responseStatus,
  textPart,
  toolCallItem,
} from "./responses_shape.ts";
import { sseResponse } from "./sse.ts";
import { isRecord } from "../_json.ts";

/**
 * Answers one Responses request of `userId`. Everything that can reject it (body, parameters, an unknown
 * `previous_response_id`, a full queue) is checked before a stream starts; see
 * {@linkcode parseResponsesRequest} for the 400s and the 404. With an `Idempotency-Key`, a repeat of the
 * request gets the first one's response (see `idempotency_key.ts`).
 */
export async function handleCreateResponse(
  request: Request,
  userId: string,
  deps: HandlerDeps,
): Promise<Response> {
  const key = idempotencyKey(request.headers);
  const body = await readJsonBody(request, { maxBytes: deps.maxBodyBytes });
  const ask = parseResponsesRequest(await withReferencesRead(body, userId, deps), request.headers);
  const marked = { request, key, userId, sessionId: ask.sessionId, body };
  return await answerMarked(marked, deps, (didWork) => answer(request, userId, ask, deps, didWork));
}

/** `GET /v1/responses/{id}`: the caller's kept response, as it was answered; 404 for any other id. */
export async function handleGetResponse(id: string, userId: string, deps: HandlerDeps): Promise<Response> {
  const notFound = requestError(404, "not_found", `Response with id '${id}' not found.`, null);
  let kept: KeptResponse | null;
  try {
    kept = await deps.store.response(userId, id);
  } catch (error) {
    // A malformed id is no response's.
    if (error instanceof SessionError) throw notFound;
    throw error;
  }
  if (kept === null) throw notFound;
  return new Response(kept.body, { headers: { "content-type": "application/json; charset=utf-8" } });
}

/**
 * `body` with each `item_reference` input item that names a kept response's message (`msg_<run id>`, as the
 * AI SDK sends back the assistant messages of a stored response) replaced by that message, and each that names
 * one of its tool calls (`mcp_<call id>`) left out: the session holds the call. A reference to no item the
 * caller has kept is a 400 naming the item.
 */
async function withReferencesRead(body: unknown, userId: string, deps: HandlerDeps): Promise<unknown> {
  if (!isRecord(body) || !Array.isArray(body.input) || !body.input.some(isReference)) return body;
  const input: unknown[] = [];
  for (const [i, item] of body.input.entries()) {
    if (!isReference(item)) {
      input.push(item);
      continue;
    }
    const message = await keptMessage(item.id, userId, deps);
    if (message === TOOL_CALL) continue;
    if (message === null) {
      const text =
        `input[${i}] refers to item '${item.id}', which is no message of a response this user kept`;
      throw invalid(text, `input[${i}].id`);
    }
    input.push(message);
  }
  return { ...body, input };
}

function isReference(item: unknown): item is { type: "item_reference"; id: string } {
  return isRecord(item) && item.type === "item_reference" && typeof item.id === "string";
}

/** What {@linkcode keptMessage} answers for a kept tool call item: nothing to read, nothing wrong. */
const TOOL_CALL = Symbol("a kept tool call");

/**
 * The kept message item `id` (`msg_<run id>`, of response `resp_<run id>`), {@linkcode TOOL_CALL} for one of
 * its tool call items (`mcp_<run id>_<n>`), or null.
 */
async function keptMessage(id: string, userId: string, deps: HandlerDeps): Promise<unknown> {
  const run = (/^msg_(.+)$/.exec(id) ?? /^mcp_(.+)_\d+$/.exec(id))?.[1];
  if (run === undefined) return null;
  let kept: KeptResponse | null;
  try {
    kept = await deps.store.response(userId, `resp_${run}`);
  } catch (error) {
    if (error instanceof SessionError) return null;
    throw error;
  }
  const output = kept === null ? [] : JSON.parse(kept.body).output as Record<string, unknown>[];
  const item = output.find((item) => item.id === id);
  if (item === undefined) return null;
  if (item.type === "mcp_call") return TOOL_CALL;
  return { type: "message", role: "assistant", content: item.content };
}

/** Where the turn runs: a kept session (`fresh`: made for this response's chain), or null: kept nowhere. */
type Target = { key: SessionKey; fresh: boolean } | null;

async function targetOf(ask: ResponsesRequest, userId: string, deps: HandlerDeps): Promise<Target> {
  if (ask.previousResponseId !== null) {
    const previous = await deps.store.response(userId, ask.previousResponseId);
    if (previous === null) throw previousResponseNotFound(ask.previousResponseId);
    if (ask.sessionId !== null && ask.sessionId !== previous.sessionId) {
      const message = `"previous_response_id" '${ask.previousResponseId}' was made on session ` +
        `"${previous.sessionId}", not on "${ask.sessionId}" the request names; send one of them`;
      throw invalid(message, "previous_response_id");
    }
    return { key: { userId, sessionId: previous.sessionId }, fresh: false };
  }
  if (ask.sessionId !== null) return { key: { userId, sessionId: ask.sessionId }, fresh: false };
  if (!ask.store) return null;
  const newId = deps.agent.newId ?? (() => crypto.randomUUID());
  return { key: { userId, sessionId: `responses-${newId()}` }, fresh: true };
}

async function answer(
  request: Request,
  userId: string,
  ask: ResponsesRequest,
  deps: HandlerDeps,
  didWork?: () => void,
): Promise<Response> {
  const createdAt = Math.floor((deps.agent.now ?? (() => new Date()))().getTime() / 1000);
  const target = await targetOf(ask, userId, deps);
  const prepared = target === null
    ? await prepareEphemeral(request, userId, ask, deps)
    : await prepareKept(request, target.key, ask, deps, { fresh: target.fresh });
  prepared.didWork = didWork;
  const echoOf = (runId: string): ResponseEcho => ({
    id: `resp_${runId}`,
    createdAt,
    previousResponseId: ask.previousResponseId,
    instructions: ask.instructionsParam,
    textFormat: ask.textFormat,
    store: ask.store,
    metadata: ask.metadata,
  });
  const keep = async (body: Record<string, unknown>) => {
    if (target === null || !ask.store) return;
    try {
      const kept = await deps.store.saveResponse(target.key, body.id as string, JSON.stringify(body));
      if (!kept) deps.log(`warning: response ${body.id} not kept: its session was deleted`);
    } catch (error) {
      deps.log(`warning: cannot keep response ${body.id}: ${(error as Error).message}`);
    }
  };
  const turn = { prepared, echoOf, keep };
  return ask.stream ? streamAnswer(turn, deps) : await jsonAnswer(turn, deps);
}

/** A prepared turn, what its response echoes by run id, and where the final response is kept. */
interface ResponseTurn {
  prepared: Prepared;
  echoOf(runId: string): ResponseEcho;
  keep(body: Record<string, unknown>): Promise<void>;
}

/**
 * What a run's events say of its tool calls, as items ({@linkcode toolCallItem}): each once its result is
 * in; `onItem` gets each as it comes.
 */
function toolCallItems(onItem: (item: Record<string, unknown>) => void = () => {}) {
  const items: Record<string, unknown>[] = [];
  const calls = new Map<string, { id: string; name: string; arguments: string }>();
  return {
    items,
    onEvent(event: RunEvent) {
      if (event.event === "tool_call") calls.set(event.data.id, event.data);
      if (event.event !== "tool_result") return;
      const call = calls.get(event.data.id);
      if (call === undefined) return;
      const item = toolCallItem(`mcp_${event.run_id}_${items.length + 1}`, call, event.data);
      items.push(item);
      onItem(item);
    },
  };
}

/**
 * The final response of a turn that ended with an answer: `text` its message, then the tool calls the agent
 * ran on the way (`tools`).
 */
function finalBody(
  echo: ResponseEcho,
  result: TurnResult,
  text: string,
  tools: readonly Record<string, unknown>[],
): Record<string, unknown> {
  const status = responseStatus(result.outcome);
  return responseBody(echo, {
    status,
    output: [messageItem(`msg_${result.runId}`, text, status), ...tools],
    usage: result.usage,
    incompleteReason: status === "incomplete" ? "max_output_tokens" : null,
    extra: waitingFor(result),
  });
}

async function jsonAnswer(turn: ResponseTurn, deps: HandlerDeps): Promise<Response> {
  let text = "";
  const tools = toolCallItems();
  const result = await runSaying(turn.prepared, deps, (piece) => text += piece, undefined, tools.onEvent);
  if (result.failure !== undefined) throw noAnswer(result, turn.prepared.kept);
  const body = finalBody(turn.echoOf(result.runId), result, text, tools.items);
  await turn.keep(body);
  return Response.json(body);
}

/**
 * The turn as Responses events: `response.created` and `response.in_progress` when the run starts, the
 * message item and its text part opened, `response.output_text.delta` as the text streams (text the model
 * wrote before calling tools too, each step's set apart by a blank line, as the JSON answer has it), then the
 * `.done` events and `response.completed` (`response.incomplete` at a limit). A turn without an answer ends
 * with an `error` event (the status and code the JSON answer would have had) and `response.failed`.
 */
function streamAnswer(turn: ResponseTurn, deps: HandlerDeps): Response {
  let event: ReturnType<typeof responseEvents> | undefined;
  return sseResponse(async (send) => {
    const put = event = responseEvents(send);
    let echo: ResponseEcho | undefined;
    let itemId = "";
    let text = "";
    const at = () => ({ item_id: itemId, output_index: 0, content_index: 0 });
    const open = (runId: string) => {
      echo = turn.echoOf(runId);
      itemId = `msg_${runId}`;
      const response = responseBody(echo, { status: "in_progress", output: [], usage: null });
      put("response.created", { response });
      put("response.in_progress", { response });
      put("response.output_item.added", { output_index: 0, item: messageItem(itemId, null, "in_progress") });
      put("response.content_part.added", { ...at(), part: textPart("") });
    };
    // Each tool call the agent ran is an item of its own after the message, added and done at once.
    const tools = toolCallItems((item) => {
      const output_index = tools.items.length;
      put("response.output_item.added", { output_index, item });
      put("response.output_item.done", { output_index, item });
    });
    const result = await runSaying(
      turn.prepared,
      deps,
      (delta) => {
        text += delta;
        put("response.output_text.delta", { ...at(), delta, logprobs: [] });
      },
      open,
      tools.onEvent,
    );
    if (echo === undefined) open(result.runId);
    if (result.failure !== undefined) {
      const error = noAnswer(result, turn.prepared.kept);
      if (error.status === 499) return;
      put("error", errorEvent(error));
      const failure = { code: "server_error", message: error.message };
      put("response.failed", {
        response: responseBody(echo!, { status: "failed", output: [], usage: result.usage, error: failure }),
      });
      return;
    }
    const body = finalBody(echo!, result, text, tools.items);
    put("response.output_text.done", { ...at(), text, logprobs: [] });
    put("response.content_part.done", { ...at(), part: textPart(text) });
    put("response.output_item.done", { output_index: 0, item: (body.output as unknown[])[0] });
    await turn.keep(body);
    put(body.status === "incomplete" ? "response.incomplete" : "response.completed", { response: body });
  }, (error, send) => {
    const failure: HttpError = toHttpError(error, deps.log, "internal error");
    if (failure.status !== 499) (event ?? responseEvents(send))("error", errorEvent(failure));
  });
}
