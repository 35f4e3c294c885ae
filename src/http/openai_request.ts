/**
 * Reading a Chat Completions request for the agent: which session (if any), the turn's question, the history
 * a self-contained request brings, the client's system messages, and how to answer. Pure.
 * @module
 */
import { ResponseFormatError, SessionError } from "../errors.ts";
import { validateId } from "../store/store.ts";
import type { Message, ResponseFormat } from "../types.ts";
import { parseResponseFormat, type ParseResponseFormatOptions } from "../agent/response_format.ts";
import { AGENT_MODEL, modelNotFound, requestError } from "./openai_shape.ts";
import type { HttpError } from "./errors.ts";
import { isRecord, jsonType } from "../_json.ts";

/** A Chat Completions request, as one agent turn. */
export interface ChatRequest {
  /** The session to continue (header `X-Session-Id`, else `metadata.session_id`), or null: self-contained. */
  sessionId: string | null;
  /** The text of the last message, a user message: the turn's question. */
  question: string;
  /** The user and assistant messages before it: the history of a self-contained request. */
  history: Message[];
  /** The client's `system` and `developer` messages, joined by blank lines, or null when it sent none. */
  instructions: string | null;
  /** Answer as `chat.completion.chunk` events. */
  stream: boolean;
  /** End the stream with a usage chunk (`stream_options.include_usage`). */
  includeUsage: boolean;
  /** What the answer must be (`response_format`: `json_object` or `json_schema`), or null: text. */
  responseFormat: ResponseFormat | null;
}

/** A role a client may send; `tool` (and `function`) are not: the agent's tools are its own. */
export const ROLES: ReadonlySet<string> = new Set(["system", "developer", "user", "assistant"]);

/** A client message as the routes read it: its role and its text. */
export interface ReadMessage {
  role: string;
  content: string;
}

/**
 * A 400 `unsupported_parameter` when the body carries client tools under one of `names` (absent, null and an
 * empty array are none): the agent runs its own.
 */
export function refuseClientTools(body: Record<string, unknown>, names: readonly string[]): void {
  for (const name of names) {
    const value = body[name];
    if (value === undefined || value === null || (Array.isArray(value) && value.length === 0)) continue;
    const message = `Client "${name}" are not supported: ${AGENT_MODEL} runs its own tools on the server ` +
      `and answers with their results; send the request without "${name}"`;
    throw requestError(400, "unsupported_parameter", message, name);
  }
}

/**
 * The turn `read` asks: its question (the last message, which must be a user message with text, else a 400 at
 * `lastParam` saying so of "the last `item`"), the user and assistant messages before it, and the system and
 * developer messages' text, in order.
 */
export function turnOf(
  read: readonly ReadMessage[],
  item: string,
  lastParam: string,
): { question: string; history: Message[]; system: string[] } {
  const last = read.at(-1)!;
  if (last.role !== "user" || last.content.trim() === "") {
    const got = last.role === "user" ? "a user message without text" : `a ${last.role} message`;
    const message = `The last ${item} must be a user message with text (it is the question of the turn), ` +
      `got ${got}`;
    throw invalid(message, lastParam);
  }
  return {
    question: last.content,
    history: read.slice(0, -1).filter((m) => m.role === "user" || m.role === "assistant")
      .map(({ role, content }) => ({ role: role as "user" | "assistant", content })),
    system: read.filter((m) => m.role === "system" || m.role === "developer").map((m) => m.content),
  };
}

/**
 * Reads `body` (parsed JSON) and `headers` as a {@linkcode ChatRequest}. Throws an `HttpError` with the
 * parameter at fault: 404 `model_not_found` for a model other than `mini-agent`; 400 for a missing or empty
 * `messages`, a last message that is not a user message with text, content that is not text, a `tool` message
 * or assistant `tool_calls`, client `tools` or `functions`, `n` other than 1, a `response_format` the runtime
 * cannot use (see `parseResponseFormat`), or an invalid session id.
 * Sampling parameters (`temperature`, `max_tokens`, …) are accepted and ignored: the agent's settings apply.
 */
export function parseChatRequest(body: unknown, headers: Headers): ChatRequest {
  if (!isRecord(body)) throw invalid("The request body must be a JSON object", null);
  checkModel(body);
  const { messages } = body;
  refuseClientTools(body, ["tools", "functions"]);
  if (body.n !== undefined && body.n !== null && body.n !== 1) {
    throw requestError(400, "unsupported_value", `"n" must be 1, got ${JSON.stringify(body.n)}`, "n");
  }
  if (messages === undefined) throw missing("messages");
  if (!Array.isArray(messages) || messages.length === 0) {
    throw invalid(`"messages" must be a non-empty array, got ${jsonType(messages)}`, "messages");
  }
  const read = messages.map(readMessage);
  const { question, history, system } = turnOf(read, "message", `messages[${read.length - 1}]`);
  return {
    sessionId: sessionIdOf(body, headers),
    question,
    history,
    instructions: system.length === 0 ? null : system.join("\n\n"),
    stream: readFlag(body.stream, "stream"),
    includeUsage: isRecord(body.stream_options)
      ? readFlag(body.stream_options.include_usage, "stream_options.include_usage")
      : false,
    responseFormat: readResponseFormat(body.response_format),
  };
}

/** Checks the request's `model`: 400 when missing or not a string, 404 `model_not_found` unless the agent's. */
export function checkModel(body: Record<string, unknown>): void {
  const { model } = body;
  if (model === undefined) throw missing("model");
  if (typeof model !== "string") throw invalid(`"model" must be a string, got ${jsonType(model)}`, "model");
  if (model !== AGENT_MODEL) throw modelNotFound(model, "model");
}

/**
 * `value` read by `parseResponseFormat` (with `options`), its `ResponseFormatError` a 400 naming the
 * parameter.
 */
export function readResponseFormat(
  value: unknown,
  param?: string,
  options?: ParseResponseFormatOptions,
): ResponseFormat | null {
  try {
    return parseResponseFormat(value, param, options);
  } catch (error) {
    if (!(error instanceof ResponseFormatError)) throw error;
    throw invalid(error.message, error.param);
  }
}

/** Message `index` as its role and text: text parts are joined by newlines. */
function readMessage(message: unknown, index: number): ReadMessage {
  const at = `messages[${index}]`;
  if (!isRecord(message)) throw invalid(`${at} must be an object, got ${jsonType(message)}`, at);
  const { role, content } = message;
  if (typeof role !== "string") {
    throw invalid(`${at}.role must be a string, got ${jsonType(role)}`, `${at}.role`);
  }
  if (!ROLES.has(role)) {
    const why = role === "tool" || role === "function"
      ? `${AGENT_MODEL} runs its own tools on the server, so the client sends no tool results`
      : "expected system, developer, user or assistant";
    throw requestError(
      400,
      "unsupported_value",
      `${at}.role "${role}" is not accepted: ${why}`,
      `${at}.role`,
    );
  }
  if (Array.isArray(message.tool_calls) && message.tool_calls.length > 0) {
    const why = `${AGENT_MODEL} runs its own tools on the server, so the client sends no tool calls`;
    throw requestError(
      400,
      "unsupported_value",
      `${at}.tool_calls are not accepted: ${why}`,
      `${at}.tool_calls`,
    );
  }
  return { role, content: readContent(content, `${at}.content`) };
}

function readContent(content: unknown, param: string): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) {
    throw invalid(`${param} must be a string or an array of text parts, got ${jsonType(content)}`, param);
  }
  return content.map((part, i) => {
    if (isRecord(part) && part.type === "text" && typeof part.text === "string") return part.text;
    const type = isRecord(part) ? JSON.stringify(part.type) : jsonType(part);
    const message = `${param}[${i}] must be a text part ({"type": "text", "text": …}), got type ${type}: ` +
      `${AGENT_MODEL} reads text only`;
    throw requestError(400, "unsupported_value", message, `${param}[${i}]`);
  }).join("\n");
}

/**
 * The session a request names (header `X-Session-Id`, else `metadata.session_id`), or null; a 400
 * `invalid_session_id` for a malformed one.
 */
export function sessionIdOf(body: Record<string, unknown>, headers: Headers): string | null {
  const header = headers.get("x-session-id");
  const metadata = isRecord(body.metadata) ? body.metadata.session_id : undefined;
  const id = header ?? metadata;
  if (id === undefined || id === null) return null;
  try {
    return validateId(id);
  } catch (error) {
    if (!(error instanceof SessionError)) throw error;
    const param = header === null ? "metadata.session_id" : null;
    const where = header === null ? "metadata.session_id" : "header X-Session-Id";
    throw requestError(400, "invalid_session_id", `${error.message} (${where})`, param);
  }
}

/** `value` as a boolean: false when absent or null, else a 400 unless it is one. */
export function readFlag(value: unknown, param: string): boolean {
  if (value === undefined || value === null) return false;
  if (typeof value !== "boolean") {
    throw invalid(`"${param}" must be a boolean, got ${jsonType(value)}`, param);
  }
  return value;
}

/** The 400 of a missing required parameter. */
export function missing(param: string): HttpError {
  return requestError(400, "missing_required_parameter", `Missing required parameter: "${param}"`, param);
}

/** The 400 `invalid_value` of parameter `param` (null: the body). */
export function invalid(message: string, param: string | null): HttpError {
  return requestError(400, "invalid_value", message, param);
}
