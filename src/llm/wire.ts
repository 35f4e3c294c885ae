/**
 * The Chat Completions wire format, mapping only: messages and tools to a request body, a completion body to
 * a {@linkcode ChatReply}, a provider's error text, `Retry-After`. Pure; the client does the I/O.
 * @module
 */
import { LlmError } from "../errors.ts";
import { shorten } from "../shorten.ts";
import { INVALID_TOOL_CALL_NAME } from "../agent/tool_calls.ts";
import type {
  ChatReply,
  Message,
  ReasoningEffort,
  ResponseFormat,
  ToolCall,
  ToolSchema,
  Usage,
} from "../types.ts";
import { isRecord } from "../_json.ts";

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

/** What the answer must be, in the provider's shape. */
export type WireResponseFormat =
  | { type: "json_object" }
  | {
    type: "json_schema";
    json_schema: { name: string; schema: Record<string, unknown>; strict?: boolean; description?: string };
  };

/** The JSON body POSTed to `/chat/completions`. */
export interface ChatCompletionRequestBody {
  model: string;
  messages: WireMessage[];
  /** Present only when at least one tool is offered: some providers reject `tools: []`. */
  tools?: WireTool[];
  /** Present only when the turn asks for structured output (and sends it natively). */
  response_format?: WireResponseFormat;
  /** Present only when an effort is set: providers without reasoning models may reject it. */
  reasoning_effort?: ReasoningEffort;
  /** With `stream_options` (asking for the final usage chunk), only on a streaming request. */
  stream?: true;
  stream_options?: { include_usage: boolean };
}

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
        tool_calls: calls.map(({ id, name, arguments: args }) => ({
          id,
          type: "function",
          function: { name, arguments: args },
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

function toWireResponseFormat(format: ResponseFormat): WireResponseFormat {
  if (format.type === "json_object") return { type: "json_object" };
  const { name, schema, strict, description } = format;
  return {
    type: "json_schema",
    json_schema: {
      name,
      ...(description === undefined ? {} : { description }),
      schema,
      ...(strict === undefined ? {} : { strict }),
    },
  };
}

/** Options of {@linkcode buildRequestBody}. */
export interface BuildRequestOptions {
  /** Sent as `response_format`: what the answer must be. @default {null} (plain text, not sent) */
  responseFormat?: ResponseFormat | null;
  /** Sent as `reasoning_effort`. @default {null} (the provider's own, not sent) */
  reasoningEffort?: ReasoningEffort | null;
}

/**
 * Maps runtime messages and tools to a request body: `runtime` messages go out as `user`, an assistant
 * message with calls gets `tool_calls` (`content: null` when it has no text), `tools` is omitted when empty,
 * `response_format` and `reasoning_effort` unless they are set. Throws `TypeError` only for a malformed
 * message (a tool message without `toolCallId`, an unknown role).
 */
export function buildRequestBody(
  model: string,
  messages: readonly Message[],
  tools: readonly ToolSchema[] = [],
  options: BuildRequestOptions = {},
): ChatCompletionRequestBody {
  const { responseFormat = null, reasoningEffort = null } = options;
  const body: ChatCompletionRequestBody = { model, messages: messages.map(toWireMessage) };
  if (tools.length > 0) body.tools = toWireTools(tools);
  if (responseFormat !== null) body.response_format = toWireResponseFormat(responseFormat);
  if (reasoningEffort !== null) body.reasoning_effort = reasoningEffort;
  return body;
}

// A session's history goes out on every request of every turn, and serializing it again each time was most
// of building a request. Only values frozen all the way the JSON reads them are cached, so none goes stale.
const messageJson = new WeakMap<Message, string>();
const toolsJson = new WeakMap<readonly ToolSchema[], string>();

function wireMessageJson(message: Message, index: number): string {
  let json = messageJson.get(message);
  if (json !== undefined) return json;
  json = JSON.stringify(toWireMessage(message, index));
  const calls = message.toolCalls;
  const frozen = calls === undefined || (Object.isFrozen(calls) && calls.every(Object.isFrozen));
  if (frozen && Object.isFrozen(message)) messageJson.set(message, json);
  return json;
}

function wireToolsJson(tools: readonly ToolSchema[]): string {
  let json = toolsJson.get(tools);
  if (json !== undefined) return json;
  json = JSON.stringify(toWireTools(tools));
  const frozen = tools.every((tool) => Object.isFrozen(tool) && Object.isFrozen(tool.parameters));
  if (frozen && Object.isFrozen(tools)) toolsJson.set(tools, json);
  return json;
}

/** Options of {@linkcode serializeRequestBody}. */
export interface SerializeRequestOptions extends BuildRequestOptions {
  /** Ask for a streamed reply, with the final usage chunk. @default {false} */
  stream?: boolean;
}

/**
 * Exactly `JSON.stringify(buildRequestBody(...))` (plus `stream`, `stream_options` when streaming), reusing
 * the JSON of each frozen message and of a frozen tool list. Throws like `buildRequestBody`.
 */
export function serializeRequestBody(
  model: string,
  messages: readonly Message[],
  tools: readonly ToolSchema[] = [],
  options: SerializeRequestOptions = {},
): string {
  const { stream = false, responseFormat = null, reasoningEffort = null } = options;
  let json = `{"model":${JSON.stringify(model)},"messages":[${messages.map(wireMessageJson).join(",")}]`;
  if (tools.length > 0) json += `,"tools":${wireToolsJson(tools)}`;
  if (responseFormat !== null) {
    json += `,"response_format":${JSON.stringify(toWireResponseFormat(responseFormat))}`;
  }
  if (reasoningEffort !== null) json += `,"reasoning_effort":${JSON.stringify(reasoningEffort)}`;
  if (stream) json += `,"stream":true,"stream_options":{"include_usage":true}`;
  return json + "}";
}

/** The `LlmError` for a body that is not a usable completion, worded the same for every cause. */
export function invalidResponseError(reason: string, source?: string): LlmError {
  const from = source === undefined ? "" : ` from ${source}`;
  return new LlmError(`Invalid LLM response${from}: ${reason}`, { kind: "invalid_response" });
}

function describeType(value: unknown): string {
  return Array.isArray(value) ? "array" : value === null ? "null" : typeof value;
}

/**
 * Never throws: a call that cannot run keeps its `problem`, so the reply's other calls still run. A missing
 * name becomes {@linkcode INVALID_TOOL_CALL_NAME} and bad arguments `"{}"`, because the call is stored and
 * sent back on the next request, which must stay valid.
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

/**
 * The usage object wherever the provider put it: the body's `usage` (OpenAI), its choice's `usage` (Moonshot's
 * streamed last chunk), or `x_groq.usage` (Groq's streamed last chunk); `undefined` when none is an object.
 */
export function reportedUsage(body: Record<string, unknown>, choice: unknown): unknown {
  const groq = isRecord(body.x_groq) ? body.x_groq.usage : undefined;
  const choiceUsage = isRecord(choice) ? choice.usage : undefined;
  return [body.usage, choiceUsage, groq].find(isRecord);
}

function parseUsage(raw: unknown): Usage | null {
  if (!isRecord(raw)) return null;
  const count = (value: unknown) => typeof value === "number" && Number.isFinite(value) ? value : null;
  return {
    promptTokens: count(raw.prompt_tokens),
    completionTokens: count(raw.completion_tokens),
    totalTokens: count(raw.total_tokens),
  };
}

/** Options of {@linkcode parseCompletion}. */
export interface ParseCompletionOptions {
  /** The model the reply names when the body has none (the one asked for). @default {""} */
  model?: string;
  /** Where the body came from (the provider's host), named in error messages. @default {undefined} */
  source?: string;
}

/**
 * Reads a parsed non-streaming completion body: `choices[0].message`'s `content` (see {@linkcode contentText};
 * DeepSeek's `""` beside tool calls becomes `null`) and `tool_calls` (a malformed call comes back with its
 * `problem`), usage as reported wherever it is (see {@linkcode reportedUsage}; `null` when absent), `model`
 * (else `options.model`); drops the rest, reasoning (`reasoning_content`, `reasoning`, thinking parts)
 * included. Throws `LlmError` of kind `invalid_response` when there is no choice or no message.
 */
export function parseCompletion(body: unknown, options: ParseCompletionOptions = {}): ChatReply {
  const { model = "", source } = options;
  if (!isRecord(body)) throw invalidResponseError("body is not a JSON object", source);
  const choices = body.choices;
  if (!Array.isArray(choices) || choices.length === 0) {
    // Some gateways answer 200 with an error object instead of a completion.
    const detail = providerErrorMessage(body);
    const said = detail === null ? "" : ` (provider said: ${detail})`;
    throw invalidResponseError(`"choices" is missing or empty${said}`, source);
  }
  const message = isRecord(choices[0]) ? choices[0].message : undefined;
  if (!isRecord(message)) throw invalidResponseError("choices[0].message is missing", source);
  const named = typeof body.model === "string" && body.model !== "" ? body.model : model;
  const usage = reportedUsage(body, choices[0]);
  return replyFromMessage(message, { usage, model: named, source, where: "choices[0].message" });
}

/** Options of {@linkcode replyFromMessage}. */
export interface ReplyFromMessageOptions extends ParseCompletionOptions {
  /** The body's `usage` object. @default {undefined} */
  usage?: unknown;
  /** How error messages name the message, e.g. `choices[0].delta`. @default {"message"} */
  where?: string;
}

/** One wire-shape assistant message as a reply, normalised like {@linkcode parseCompletion}; throws like it. */
export function replyFromMessage(
  message: Record<string, unknown>,
  options: ReplyFromMessageOptions = {},
): ChatReply {
  const { usage, model = "", source, where = "message" } = options;
  const rawCalls = message.tool_calls ?? [];
  if (!Array.isArray(rawCalls)) throw invalidResponseError(`${where}.tool_calls is not an array`, source);
  const toolCalls = rawCalls.map(parseToolCall);
  const text = contentText(message.content, { where: `${where}.content`, source });
  const content = text === "" && toolCalls.length > 0 ? null : text;
  return { content, toolCalls, usage: parseUsage(usage), model };
}

/** Options of {@linkcode contentText}. */
export interface ContentTextOptions {
  /** How error messages name the content, e.g. `choices[0].delta.content`. @default {"content"} */
  where?: string;
  /** Where the body came from (the provider's host), named in error messages. @default {undefined} */
  source?: string;
}

/**
 * The answer text of a message's (or delta's) `content`: a string as is, `null` or absent as `null`, an array
 * of parts (Mistral's reasoning models) as its `text` parts joined, `null` when it has none. Other parts are
 * dropped: `thinking` is reasoning, never kept; unknown types are ignored. Throws `LlmError` of kind
 * `invalid_response` for any other value, a part that is not an object, or a text part without a string.
 */
export function contentText(content: unknown, options: ContentTextOptions = {}): string | null {
  const { where = "content", source } = options;
  if (content === undefined || content === null || typeof content === "string") return content ?? null;
  if (!Array.isArray(content)) throw invalidResponseError(`${where} is neither a string nor null`, source);
  let text: string | null = null;
  for (const [i, part] of content.entries()) {
    if (!isRecord(part)) {
      throw invalidResponseError(`${where}[${i}] is ${describeType(part)}, not a content part`, source);
    }
    if (part.type !== "text") continue;
    if (typeof part.text !== "string") {
      throw invalidResponseError(`${where}[${i}] is a text part without a string "text"`, source);
    }
    text = (text ?? "") + part.text;
  }
  return text;
}

/** The provider's own explanation in `{"error": {"message"}}` (or `{"error": "..."}`), if any. */
export function providerErrorMessage(body: unknown): string | null {
  if (!isRecord(body)) return null;
  const error = body.error;
  if (typeof error === "string" && error !== "") return error;
  if (isRecord(error) && typeof error.message === "string" && error.message !== "") return error.message;
  return null;
}

/** A provider's body text on one line, cut to a length fit for an error message. */
export function quoteBody(text: string): string {
  return shorten(text, 200, { oneLine: true });
}

/** The wait a `Retry-After` header asks for in ms (seconds, or an HTTP-date after `nowMs`); else `null`. */
export function parseRetryAfter(header: string | null, nowMs: number): number | null {
  if (header === null) return null;
  const value = header.trim();
  if (/^\d+(\.\d+)?$/.test(value)) return Number(value) * 1000;
  const date = Date.parse(value);
  return Number.isNaN(date) ? null : Math.max(0, date - nowMs);
}
