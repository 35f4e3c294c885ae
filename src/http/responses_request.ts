/**
 * Reading a Responses API request (`POST /v1/responses`) for the agent: the input as the turn's question and
 * the history before it, the instructions, which session it continues (`previous_response_id`, the
 * session id header or metadata), whether it is kept (`store`), and how to answer. Pure.
 * @module
 */
import { SessionError } from "../errors.ts";
import { validateId } from "../store/store.ts";
import { isRecord, jsonType } from "../_json.ts";
import type { HttpError } from "./errors.ts";
import {
  checkModel,
  invalid,
  missing,
  readFlag,
  type ReadMessage,
  readResponseFormat,
  refuseClientTools,
  ROLES,
  sessionIdOf,
  turnOf,
} from "./openai_request.ts";
import { AGENT_MODEL, requestError } from "./openai_shape.ts";
import type { TurnAsk } from "./openai_turn.ts";

/** A Responses request, as one agent turn. */
export interface ResponsesRequest extends TurnAsk {
  /** The session named by header `X-Session-Id`, else `metadata.session_id`, or null. */
  sessionId: string | null;
  /** The response whose session the turn continues, or null. */
  previousResponseId: string | null;
  /** Answer as Responses events. */
  stream: boolean;
  /** Keep the response (and, without a session, a new session for its chain). */
  store: boolean;
  /** `instructions` as the client sent it (echoed on the response), or null. */
  instructionsParam: string | null;
  /** `text.format` as the response echoes it: `{"type": "text"}` unless the client asked for JSON. */
  textFormat: Record<string, unknown>;
  /** `metadata` as the client sent it, echoed. */
  metadata: Record<string, unknown>;
}

/**
 * Reads `body` (parsed JSON) and `headers` as a {@linkcode ResponsesRequest}. Throws an `HttpError` with the
 * parameter at fault: 404 `model_not_found` for a model other than `mini-agent`; 400 for a missing or empty
 * `input`, an input item other than a message (`function_call_output`, `item_reference`, …), content other
 * than text (`input_image`: images are not supported yet; an `item_reference` is read by the route first), a last item that is not a user message with text,
 * client `tools`, a `text.format` the runtime cannot use, or a malformed session or response id.
 * Sampling parameters (`temperature`, `max_output_tokens`, …) are accepted and ignored.
 */
export function parseResponsesRequest(body: unknown, headers: Headers): ResponsesRequest {
  if (!isRecord(body)) throw invalid("The request body must be a JSON object", null);
  checkModel(body);
  refuseClientTools(body, ["tools"]);
  const messages = readInput(body.input);
  const lastParam = typeof body.input === "string" ? "input" : `input[${messages.length - 1}]`;
  const { question, history, system } = turnOf(messages, "input item", lastParam);
  const instructionsParam = readInstructions(body.instructions);
  const given = [...(instructionsParam === null ? [] : [instructionsParam]), ...system];
  const { responseFormat, textFormat } = readText(body.text);
  return {
    sessionId: sessionIdOf(body, headers),
    previousResponseId: readResponseId(body.previous_response_id),
    question,
    history,
    instructions: given.length === 0 ? null : given.join("\n\n"),
    instructionsParam,
    stream: readFlag(body.stream, "stream"),
    store: body.store === undefined || body.store === null ? true : readFlag(body.store, "store"),
    responseFormat,
    textFormat,
    metadata: readMetadata(body.metadata),
  };
}

/** `input` as messages, each its role and text (text parts joined by newlines). */
function readInput(input: unknown): ReadMessage[] {
  if (input === undefined) throw missing("input");
  if (typeof input === "string") return [{ role: "user", content: input }];
  if (!Array.isArray(input) || input.length === 0) {
    throw invalid(`"input" must be a string or a non-empty array of items, got ${jsonType(input)}`, "input");
  }
  return input.map(readItem);
}

function readItem(item: unknown, index: number): ReadMessage {
  const at = `input[${index}]`;
  if (!isRecord(item)) throw invalid(`${at} must be an object, got ${jsonType(item)}`, at);
  if (item.type !== undefined && item.type !== "message") {
    const why = typeof item.type === "string" && /function_call|tool|mcp|computer|shell/.test(item.type)
      ? `${AGENT_MODEL} runs its own tools on the server, so the client sends no tool calls or results`
      : `${AGENT_MODEL} reads messages only (items of type "message", or {role, content})`;
    const type = typeof item.type === "string" ? `"${item.type}"` : jsonType(item.type);
    throw requestError(400, "unsupported_value", `${at}.type ${type} is not accepted: ${why}`, `${at}.type`);
  }
  const { role, content } = item;
  if (typeof role !== "string") {
    throw invalid(`${at}.role must be a string, got ${jsonType(role)}`, `${at}.role`);
  }
  if (!ROLES.has(role)) {
    const message = `${at}.role "${role}" is not accepted: expected system, developer, user or assistant`;
    throw requestError(400, "unsupported_value", message, `${at}.role`);
  }
  return { role, content: readContent(content, `${at}.content`) };
}

/** Text parts a message may carry: the input's, and an assistant message's output text sent back. */
const TEXT_PARTS = new Set(["input_text", "output_text", "text"]);

function readContent(content: unknown, param: string): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) {
    throw invalid(`${param} must be a string or an array of text parts, got ${jsonType(content)}`, param);
  }
  return content.map((part, i) => {
    const at = `${param}[${i}]`;
    if (isRecord(part) && TEXT_PARTS.has(part.type as string) && typeof part.text === "string") {
      return part.text;
    }
    if (isRecord(part) && part.type === "input_image") {
      const message = `${at} is an image: images are not supported yet; send text parts ("input_text")`;
      throw requestError(400, "unsupported_value", message, at);
    }
    const type = isRecord(part) ? JSON.stringify(part.type) : jsonType(part);
    const message = `${at} must be a text part ({"type": "input_text", "text": …}), got type ${type}: ` +
      `${AGENT_MODEL} reads text only`;
    throw requestError(400, "unsupported_value", message, at);
  }).join("\n");
}

function readInstructions(value: unknown): string | null {
  if (value === undefined || value === null || value === "") return null;
  if (typeof value !== "string") {
    throw invalid(`"instructions" must be a string, got ${jsonType(value)}`, "instructions");
  }
  return value;
}

/** `text.format` for the turn (parsed as chat completions' `response_format` is) and as echoed. */
function readText(
  text: unknown,
): { responseFormat: TurnAsk["responseFormat"]; textFormat: Record<string, unknown> } {
  if (text === undefined || text === null) return { responseFormat: null, textFormat: { type: "text" } };
  if (!isRecord(text)) throw invalid(`"text" must be an object, got ${jsonType(text)}`, "text");
  const format = text.format;
  const responseFormat = readResponseFormat(format, "text.format", { flat: true });
  return { responseFormat, textFormat: isRecord(format) ? format : { type: "text" } };
}

function readResponseId(value: unknown): string | null {
  if (value === undefined || value === null) return null;
  try {
    return validateId(value, "response id");
  } catch (error) {
    if (!(error instanceof SessionError)) throw error;
    throw invalid(`"previous_response_id": ${error.message}`, "previous_response_id");
  }
}

function readMetadata(value: unknown): Record<string, unknown> {
  if (value === undefined || value === null) return {};
  if (!isRecord(value)) throw invalid(`"metadata" must be an object, got ${jsonType(value)}`, "metadata");
  return value;
}

/** The 404 of a `previous_response_id` the caller has no kept response of (OpenAI's code). */
export function previousResponseNotFound(id: string): HttpError {
  const message = `Previous response with id '${id}' not found: it was never made by this user, ` +
    `was made with "store": false, or its session was deleted`;
  return requestError(404, "previous_response_not_found", message, "previous_response_id");
}
