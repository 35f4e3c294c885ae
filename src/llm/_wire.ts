/**
 * The Chat Completions wire format: how runtime messages become a request body, and how a response body
 * becomes a {@linkcode ChatReply}. Pure functions only; `openai.ts` does the I/O and re-exports the public
 * ones.
 * @module
 */
import { isFrozenMessage } from "../context.ts";
import { LlmError } from "../errors.ts";
import { isFrozenToolList } from "../tools/registry.ts";
import { INVALID_TOOL_CALL_NAME } from "../tool_calls.ts";
import type { ChatReply, Message, ToolCall, ToolSchema, Usage } from "../types.ts";

/** A tool call as the request body carries it inside an assistant message. */
export interface WireToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}

/** One message of the request body, in the provider's shape. */
export type WireMessage =
  | { role: "system" | "user"; content: string }
  | { role: "assistant"; content: string | null; tool_calls?: WireToolCall[] }
  | { role: "tool"; tool_call_id: string; content: string };

/** One tool of the request body. */
export interface WireTool {
  type: "function";
  function: ToolSchema;
}

/** The JSON body POSTed to `/chat/completions`. */
export interface ChatCompletionRequestBody {
  model: string;
  messages: WireMessage[];
  /** Present only when at least one tool is offered: some providers reject `tools: []`. */
  tools?: WireTool[];
  /** Present only on a streaming request. */
  stream?: true;
  /** Asks for the final usage chunk; present only on a streaming request. */
  stream_options?: { include_usage: boolean };
}

/** Longest piece of a provider's body quoted in an error message. */
const MAX_QUOTED_CHARS = 200;

function toWireMessage(message: Message, index: number): WireMessage {
  // Providers reject `content: null` on these roles; an empty string means the same to the model.
  const content = message.content ?? "";
  switch (message.role) {
    case "system":
    case "user":
      return { role: message.role, content };
    case "runtime":
      // The nudge already carries its "[runtime]" prefix; the provider only knows user messages.
      return { role: "user", content };
    case "assistant": {
      const calls = message.toolCalls ?? [];
      if (calls.length === 0) return { role: "assistant", content };
      return {
        role: "assistant",
        content: message.content || null,
        tool_calls: calls.map((call) => ({
          id: call.id,
          type: "function",
          function: { name: call.name, arguments: call.arguments },
        })),
      };
    }
    case "tool":
      if (typeof message.toolCallId !== "string" || message.toolCallId === "") {
        throw new TypeError(`Cannot build request: tool message ${index} has no toolCallId`);
      }
      return { role: "tool", tool_call_id: message.toolCallId, content };
    default: {
      // Unreachable for typed callers; messages loaded from storage are not checked by the compiler.
      const role: unknown = (message as { role: unknown }).role;
      throw new TypeError(`Cannot build request: message ${index} has unknown role ${JSON.stringify(role)}`);
    }
  }
}

function toWireTools(tools: readonly ToolSchema[]): WireTool[] {
  return tools.map(({ name, description, parameters }) => ({
    type: "function",
    function: { name, description, parameters },
  }));
}

/**
 * Maps runtime messages and tools to a Chat Completions request body.
 *
 * `runtime` messages go out as `user`; an assistant message with calls gets `tool_calls` (never an empty
 * array) and `content: null` when it has no text; `tools` is omitted when empty. Pure; throws `TypeError`
 * only for a malformed message (a tool message without `toolCallId`, an unknown role).
 */
export function buildRequestBody(
  model: string,
  messages: readonly Message[],
  tools: readonly ToolSchema[] = [],
): ChatCompletionRequestBody {
  const body: ChatCompletionRequestBody = { model, messages: messages.map(toWireMessage) };
  if (tools.length > 0) body.tools = toWireTools(tools);
  return body;
}

// The JSON of frozen messages and tool lists, computed once: a session's history goes out on every request
// of every turn, and serializing it again each time was most of building a request. Only frozen values (with
// their tool calls, or their parameters) are cached, so a cached text does not go stale.
const messageJson = new WeakMap<Message, string>();
const toolsJson = new WeakMap<readonly ToolSchema[], string>();

function wireMessageJson(message: Message, index: number): string {
  let json = messageJson.get(message);
  if (json === undefined) {
    json = JSON.stringify(toWireMessage(message, index));
    if (isFrozenMessage(message)) messageJson.set(message, json);
  }
  return json;
}

function wireToolsJson(tools: readonly ToolSchema[]): string {
  let json = toolsJson.get(tools);
  if (json === undefined) {
    json = JSON.stringify(toWireTools(tools));
    if (isFrozenToolList(tools)) toolsJson.set(tools, json);
  }
  return json;
}

/** Options of {@linkcode serializeRequestBody}. */
export interface SerializeRequestOptions {
  /**
   * Ask for a streamed reply, with the final usage chunk.
   * @default {false}
   */
  stream?: boolean;
}

/**
 * The request body as JSON text: exactly `JSON.stringify` of {@linkcode buildRequestBody}'s body (plus
 * `stream` and `stream_options` when streaming), with each frozen message's and the frozen tool list's JSON
 * reused from earlier requests. Throws like `buildRequestBody`.
 */
export function serializeRequestBody(
  model: string,
  messages: readonly Message[],
  tools: readonly ToolSchema[] = [],
  options: SerializeRequestOptions = {},
): string {
  const { stream = false } = options;
  let json = `{"model":${JSON.stringify(model)},"messages":[${messages.map(wireMessageJson).join(",")}]`;
  if (tools.length > 0) json += `,"tools":${wireToolsJson(tools)}`;
  if (stream) json += `,"stream":true,"stream_options":{"include_usage":true}`;
  return json + "}";
}

/** Options of {@linkcode parseCompletion}. */
export interface ParseCompletionOptions {
  /**
   * The model the reply names when the body has no `model` (the one the request asked for).
   * @default {""}
   */
  model?: string;
  /**
   * Where the body came from (the provider's host), named in error messages.
   * @default {undefined}
   */
  source?: string;
}

/** A reason the body is not a usable completion; {@linkcode parseCompletion} turns it into an `LlmError`. */
class InvalidCompletion extends Error {}

function invalid(reason: string): InvalidCompletion {
  return new InvalidCompletion(reason);
}

/** The `LlmError` for a body that is not a usable completion, worded the same for every cause. */
export function invalidResponseError(reason: string, source?: string): LlmError {
  const from = source === undefined ? "" : ` from ${source}`;
  return new LlmError(`Invalid LLM response${from}: ${reason}`, { kind: "invalid_response" });
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function tokenCount(value: unknown): number | null {
  return typeof value === "number" && Number.isFinite(value) ? value : null;
}

function describeType(value: unknown): string {
  return Array.isArray(value) ? "array" : value === null ? "null" : typeof value;
}

/**
 * One tool call of a reply. Never throws: a call that cannot run is returned with its `problem`, so the
 * other calls of the reply still run. A missing id becomes `""` (the loop gives it a unique one), a missing
 * name the placeholder {@linkcode INVALID_TOOL_CALL_NAME}, and arguments of the wrong type `"{}"`: the call
 * is stored and sent back on the next request, which must stay valid.
 */
function parseToolCall(raw: unknown): ToolCall {
  const call = isRecord(raw) ? raw : {};
  const fn = isRecord(call.function) ? call.function : {};
  const problems: string[] = [];
  if (!isRecord(raw)) problems.push(`the call is ${describeType(raw)}, not an object`);
  let name = typeof fn.name === "string" ? fn.name : "";
  if (name === "") {
    name = INVALID_TOOL_CALL_NAME;
    if (isRecord(raw)) problems.push("it has no function name");
  }
  const args = fn.arguments;
  // A call without arguments means "no arguments"; some providers send them as an object, not a string.
  let serialized = "{}";
  if (typeof args === "string" && args !== "") serialized = args;
  else if (isRecord(args)) serialized = JSON.stringify(args);
  else if (args !== undefined && args !== null && args !== "") {
    problems.push(`its arguments must be a JSON string or object, got ${describeType(args)}`);
  }
  const parsed: ToolCall = { id: typeof call.id === "string" ? call.id : "", name, arguments: serialized };
  if (problems.length > 0) parsed.problem = problems.join("; ");
  return parsed;
}

function parseUsage(raw: unknown): Usage | null {
  if (!isRecord(raw)) return null;
  return {
    promptTokens: tokenCount(raw.prompt_tokens),
    completionTokens: tokenCount(raw.completion_tokens),
    totalTokens: tokenCount(raw.total_tokens),
  };
}

/**
 * Reads a parsed non-streaming Chat Completions body into a {@linkcode ChatReply}.
 *
 * Takes `choices[0].message`: its `content` (DeepSeek's `""` beside tool calls becomes `null`), its
 * `tool_calls` (missing arguments become `"{}"`, non-string arguments are serialized), `usage` as reported
 * (`null` when absent, never estimated) and `model` (`options.model` when the body has none). Drops
 * everything else, `reasoning_content` included. A malformed tool call does not fail the reply: it comes
 * back with a `problem` (see {@linkcode ToolCall.problem}), a missing id as `""`. Throws `LlmError` of kind
 * `invalid_response` when the body has no choices or no message.
 */
export function parseCompletion(body: unknown, options: ParseCompletionOptions = {}): ChatReply {
  const { model = "", source } = options;
  try {
    return readCompletion(body, model);
  } catch (error) {
    if (error instanceof InvalidCompletion) throw invalidResponseError(error.message, source);
    throw error;
  }
}

function readCompletion(body: unknown, fallbackModel: string): ChatReply {
  if (!isRecord(body)) throw invalid("body is not a JSON object");
  const choices = body.choices;
  if (!Array.isArray(choices) || choices.length === 0) {
    // Some gateways answer 200 with an error object instead of a completion.
    const detail = providerErrorMessage(body);
    throw invalid(`"choices" is missing or empty${detail === null ? "" : ` (provider said: ${detail})`}`);
  }
  const first = choices[0];
  const message = isRecord(first) ? first.message : undefined;
  if (!isRecord(message)) throw invalid("choices[0].message is missing");
  const model = typeof body.model === "string" && body.model !== "" ? body.model : fallbackModel;
  return readMessage(message, "choices[0].message", body.usage, model);
}

/** The one place a message becomes a reply, so a streamed reply is normalised exactly like a whole one. */
function readMessage(
  message: Record<string, unknown>,
  where: string,
  usage: unknown,
  model: string,
): ChatReply {
  const rawCalls = message.tool_calls ?? [];
  if (!Array.isArray(rawCalls)) throw invalid(`${where}.tool_calls is not an array`);
  const toolCalls = rawCalls.map(parseToolCall);

  const rawContent = message.content ?? null;
  if (rawContent !== null && typeof rawContent !== "string") {
    throw invalid(`${where}.content is neither a string nor null`);
  }
  const content = rawContent === "" && toolCalls.length > 0 ? null : rawContent;
  return { content, toolCalls, usage: parseUsage(usage), model };
}

/** Options of {@linkcode replyFromMessage}. */
export interface ReplyFromMessageOptions {
  /** The body's `usage` object, read as {@linkcode parseCompletion} reads it. @default {undefined} */
  usage?: unknown;
  /** The model the reply names. @default {""} */
  model?: string;
  /** Where the message came from (the provider's host), named in error messages. @default {undefined} */
  source?: string;
  /** How error messages name the message, e.g. `choices[0].delta` for a streamed one. @default {"message"} */
  where?: string;
}

/**
 * The reply for one assistant message object in the wire shape (`content`, `tool_calls`), normalised
 * exactly as {@linkcode parseCompletion} normalises `choices[0].message`; a streamed reply is reassembled
 * into that shape and read here. Throws `LlmError` of kind `invalid_response` like `parseCompletion`.
 */
export function replyFromMessage(
  message: Record<string, unknown>,
  options: ReplyFromMessageOptions = {},
): ChatReply {
  const { usage, model = "", source, where = "message" } = options;
  try {
    return readMessage(message, where, usage, model);
  } catch (error) {
    if (error instanceof InvalidCompletion) throw invalidResponseError(error.message, source);
    throw error;
  }
}

/** The provider's own explanation in `{"error": {"message"}}` (or `{"error": "..."}`), if any. */
export function providerErrorMessage(body: unknown): string | null {
  if (!isRecord(body)) return null;
  const error = body.error;
  if (typeof error === "string" && error !== "") return error;
  if (isRecord(error) && typeof error.message === "string" && error.message !== "") return error.message;
  return null;
}

/** The body text squeezed onto one line and cut to a length fit for an error message. */
export function quoteBody(text: string): string {
  const line = text.replace(/\s+/g, " ").trim();
  return line.length <= MAX_QUOTED_CHARS ? line : `${line.slice(0, MAX_QUOTED_CHARS)}…`;
}

/**
 * The wait a `Retry-After` header asks for, in milliseconds: delta-seconds or an HTTP-date measured against
 * `nowMs`. `null` when the header is absent or unreadable; a date in the past means no wait.
 */
export function parseRetryAfter(header: string | null, nowMs: number): number | null {
  if (header === null) return null;
  const value = header.trim();
  if (/^\d+(\.\d+)?$/.test(value)) return Number(value) * 1000;
  const date = Date.parse(value);
  if (Number.isNaN(date)) return null;
  return Math.max(0, date - nowMs);
}
