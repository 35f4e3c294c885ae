/**
 * The Chat Completions wire format, mapping only: messages and tools to a request body, a completion body to
 * a {@linkcode ChatReply}, a provider's error text, `Retry-After`. Pure; the client does the I/O.
 * @module
 */
import { LlmError } from "../errors.ts";
import { shorten } from "../shorten.ts";
import type {
  ChatReply,
  ImagePart,
  Message,
  ProviderState,
  ReasoningEffort,
  ResponseFormat,
  ToolCall,
  ToolChoice,
  ToolSchema,
  Usage,
} from "../types.ts";
import { deepFreeze, isRecord, jsonType } from "../_json.ts";

/**
 * The name stored for a call the provider sent without a usable function name. Providers reject a stored
 * call with an empty name on the next request, so the history carries this placeholder; no tool has it.
 */
export const INVALID_TOOL_CALL_NAME = "invalid_tool_call";

/**
 * A tool call as the request body carries it inside an assistant message, with what its provider sent beside
 * it (`extra_content`) when it goes back to that provider.
 */
export interface WireToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
  [state: string]: unknown;
}

/** An assistant message of the request body, with the fields of its provider state when it goes back there. */
export interface WireAssistantMessage {
  role: "assistant";
  content: string | null;
  tool_calls?: WireToolCall[];
  [state: string]: unknown;
}

/** One part of a user message that carries images: its text, or one image as a `data:` URL. */
export type WireContentPart =
  | { type: "text"; text: string }
  | { type: "image_url"; image_url: { url: string } };

/** One message of the request body, in the provider's shape. */
export type WireMessage =
  | { role: "system" | "user"; content: string }
  | { role: "user"; content: WireContentPart[] }
  | WireAssistantMessage
  | { role: "tool"; tool_call_id: string; content: string };

/**
 * The fields of an assistant message that its provider needs back on later requests: DeepSeek's, Kimi's and
 * Qwen's `reasoning_content` (thinking mode with tools), OpenRouter's `reasoning_details`, Gemini's
 * `extra_content` (its `google.thought_signature`).
 */
export const MESSAGE_STATE_FIELDS: readonly string[] = [
  "reasoning_content",
  "reasoning_details",
  "extra_content",
];
/** The fields of a tool call its provider needs back: Gemini's `extra_content.google.thought_signature`. */
export const CALL_STATE_FIELDS: readonly string[] = ["extra_content"];

/**
 * Who produced a provider state: the endpoint and the model family, so that state goes back only where it
 * came from. The family is the model name in lower case without a trailing date or `-latest`
 * (`gpt-5-2025-08-07` and `gpt-5` are one family); another endpoint or model is another origin.
 */
export function modelOrigin(baseUrl: string, model: string): string {
  const family = model.trim().toLowerCase().replace(/-(\d{4}-\d{2}-\d{2}|\d{8}|latest)$/, "");
  return `${baseUrl.replace(/\/+$/, "")} ${family}`;
}

/** One tool of the request body. */
export interface WireTool {
  type: "function";
  function: ToolSchema;
}

/** What the answer must be, in the provider's shape. */
export type WireResponseFormat =
  | { type: "json_object" }
  | { type: "json_schema"; json_schema: Omit<Extract<ResponseFormat, { type: "json_schema" }>, "type"> };

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
  /** Present only as `none` with tools: they are offered but may not be called. */
  tool_choice?: "none";
  /** With `stream_options` (asking for the final usage chunk), only on a streaming request. */
  stream?: true;
  stream_options?: { include_usage: boolean };
}

/** An image as the `data:` URL that Chat Completions' `image_url` and Responses' `input_image` take. */
export function imageDataUrl(image: ImagePart): string {
  return `data:${image.mediaType};base64,${image.data}`;
}

/** A user message's images, or none: every other role ignores them. */
export function imagesOf(message: Message): readonly ImagePart[] {
  return message.role === "user" ? message.images ?? [] : [];
}

function toWireMessage(message: Message, index: number, origin: string | null): WireMessage {
  // Providers reject `content: null` on these roles; an empty string means the same to the model.
  const content = message.content ?? "";
  switch (message.role) {
    case "system":
      return { role: message.role, content };
    case "user": {
      const images = imagesOf(message);
      if (images.length === 0) return { role: "user", content };
      // The text first, as OpenAI's vision guide writes it; an empty text part is left out.
      const parts: WireContentPart[] = content === "" ? [] : [{ type: "text", text: content }];
      for (const image of images) parts.push({ type: "image_url", image_url: { url: imageDataUrl(image) } });
      return { role: "user", content: parts };
    }
    case "runtime":
      // The nudge already carries its "[runtime]" prefix; the provider only knows user messages.
      return { role: "user", content };
    case "assistant": {
      const calls = message.toolCalls ?? [];
      const state = origin !== null && message.providerState?.origin === origin
        ? message.providerState
        : null;
      if (calls.length === 0) return { role: "assistant", content, ...state?.message };
      return {
        role: "assistant",
        content: message.content || null,
        ...state?.message,
        tool_calls: calls.map(({ id, name, arguments: args }, i) => ({
          id,
          type: "function",
          function: { name, arguments: args },
          ...state?.calls?.[i],
        })),
      };
    }
    case "tool":
      return { role: "tool", tool_call_id: toolCallIdOf(message, index), content };
    default:
      throw unknownRole(message, index);
  }
}

/** The `toolCallId` of tool message `index`; `TypeError` when it has none. */
export function toolCallIdOf(message: Message, index: number): string {
  if (typeof message.toolCallId !== "string" || message.toolCallId === "") {
    throw new TypeError(`Cannot build request: tool message ${index} has no toolCallId`);
  }
  return message.toolCallId;
}

/** The error for message `index` of a role no dialect knows. */
export function unknownRole(message: Message, index: number): TypeError {
  // Unreachable for typed callers; messages loaded from storage are not checked by the compiler.
  const role: unknown = (message as { role: unknown }).role;
  return new TypeError(`Cannot build request: message ${index} has unknown role ${JSON.stringify(role)}`);
}

function toWireTools(tools: readonly ToolSchema[]): WireTool[] {
  return tools.map(({ name, description, parameters }) => ({
    type: "function",
    function: { name, description, parameters },
  }));
}

export function toWireResponseFormat(format: ResponseFormat): WireResponseFormat {
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
  /**
   * The origin (see {@linkcode modelOrigin}) the request goes to: assistant messages whose provider state came
   * from it carry that state back; any other state is left out. @default {null} (no state is sent)
   */
  origin?: string | null;
  /** Sent as `reasoning_effort`. @default {null} (the provider's own, not sent) */
  reasoningEffort?: ReasoningEffort | null;
  /** `none` is sent as `tool_choice` when tools are offered; `auto` is the API's default, not sent. @default {"auto"} */
  toolChoice?: ToolChoice;
}

/**
 * Maps runtime messages and tools to a request body: `runtime` messages go out as `user`, a user message with
 * images as content parts (its text, unless empty, then an `image_url` part per image), an assistant
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
  const { responseFormat = null, origin = null, reasoningEffort = null, toolChoice = "auto" } = options;
  const wire = messages.map((message, i) => toWireMessage(message, i, origin));
  const body: ChatCompletionRequestBody = { model, messages: wire };
  if (tools.length > 0) body.tools = toWireTools(tools);
  if (tools.length > 0 && toolChoice === "none") body.tool_choice = "none";
  if (responseFormat !== null) body.response_format = toWireResponseFormat(responseFormat);
  if (reasoningEffort !== null) body.reasoning_effort = reasoningEffort;
  return body;
}

// A session's history goes out on every request of every turn, and serializing it again each time was most
// of building a request. Only values frozen all the way the JSON reads them are cached, so none goes stale;
// a message with provider state is cached with the origin it was built for.
const messageJson = new WeakMap<Message, { origin: string | null; json: string }>();
const toolsJson = new WeakMap<readonly ToolSchema[], string>();

/** Whether `message` is frozen as far as its JSON reads it, so that its JSON can be kept. */
function isFrozenMessage(message: Message): boolean {
  const calls = message.toolCalls;
  const images = message.images;
  const frozen = (calls === undefined || (Object.isFrozen(calls) && calls.every(Object.isFrozen))) &&
    (images === undefined || (Object.isFrozen(images) && images.every(Object.isFrozen)));
  // A provider state is frozen all the way by whoever made it (see `replyFromMessage`, the store).
  const state = message.providerState;
  return frozen && Object.isFrozen(message) && (state === undefined || Object.isFrozen(state));
}

function wireMessageJson(message: Message, index: number, origin: string | null): string {
  const cached = messageJson.get(message);
  if (cached !== undefined && (cached.origin === origin || message.providerState === undefined)) {
    return cached.json;
  }
  const json = JSON.stringify(toWireMessage(message, index, origin));
  if (isFrozenMessage(message)) messageJson.set(message, { origin, json });
  return json;
}

/**
 * The last request's messages and their joined JSON, with where each of its frozen leading messages ends in
 * it. The next request starts with the same message objects (the rest of the turn, the session's next
 * turn), so that much of its JSON is taken as it was, without looking at those messages again.
 */
let lastMessages: {
  messages: readonly Message[];
  origin: string | null;
  json: string;
  ends: number[];
} | null = null;

/** The messages' JSON joined by commas: `messages.map(wireMessageJson).join(",")`. */
function messagesJson(messages: readonly Message[], origin: string | null): string {
  const last = lastMessages?.origin === origin ? lastMessages : null;
  let same = 0;
  if (last !== null) {
    const max = Math.min(last.ends.length, messages.length);
    while (same < max && messages[same] === last.messages[same]) same++;
  }
  const ends = same === 0 ? [] : last!.ends.slice(0, same);
  const parts = same === 0 ? [] : [last!.json.slice(0, ends[same - 1])];
  let end = same === 0 ? -1 : ends[same - 1];
  let frozen = true;
  for (let i = same; i < messages.length; i++) {
    const json = wireMessageJson(messages[i], i, origin);
    parts.push(json);
    end += 1 + json.length;
    frozen &&= isFrozenMessage(messages[i]);
    if (frozen) ends.push(end);
  }
  const json = parts.join(",");
  lastMessages = { messages, origin, json, ends };
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
  const { stream = false, responseFormat = null, origin = null, reasoningEffort = null } = options;
  let json = `{"model":${JSON.stringify(model)},"messages":[${messagesJson(messages, origin)}]`;
  if (tools.length > 0) json += `,"tools":${wireToolsJson(tools)}`;
  if (tools.length > 0 && options.toolChoice === "none") json += `,"tool_choice":"none"`;
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

/**
 * Never throws: a call that cannot run keeps its `problem`, so the reply's other calls still run. A missing
 * name becomes {@linkcode INVALID_TOOL_CALL_NAME} and bad arguments `"{}"`, because the call is stored and
 * sent back on the next request, which must stay valid.
 */
function parseToolCall(raw: unknown): ToolCall {
  const call = isRecord(raw) ? raw : {};
  const fn = isRecord(call.function) ? call.function : {};
  const parsed = toolCallOf(call.id, fn.name, fn.arguments);
  if (isRecord(raw)) return parsed;
  // Not an object at all: that is the one problem worth naming.
  return { ...parsed, problem: `the call is ${jsonType(raw)}, not an object` };
}

/**
 * A call from its id, name and arguments as a dialect found them; never throws (see {@linkcode parseToolCall}):
 * no name becomes {@linkcode INVALID_TOOL_CALL_NAME}, arguments neither a JSON string nor an object `"{}"`, each
 * with its `problem`.
 */
export function toolCallOf(id: unknown, name: unknown, args: unknown): ToolCall {
  const problems: string[] = [];
  let named = typeof name === "string" ? name : "";
  if (named === "") {
    named = INVALID_TOOL_CALL_NAME;
    problems.push("it has no function name");
  }
  // A call without arguments means "no arguments"; some providers send them as an object, not a string.
  let serialized = "{}";
  if (typeof args === "string" && args !== "") serialized = args;
  else if (isRecord(args)) serialized = JSON.stringify(args);
  else if (args !== undefined && args !== null && args !== "") {
    problems.push(`its arguments must be a JSON string or object, got ${jsonType(args)}`);
  }
  const call: ToolCall = { id: typeof id === "string" ? id : "", name: named, arguments: serialized };
  if (problems.length > 0) call.problem = problems.join("; ");
  return call;
}

/** A finite number as is, anything else as null: a count a usage object reports. */
export function countOf(value: unknown): number | null {
  return typeof value === "number" && Number.isFinite(value) ? value : null;
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

/**
 * The counts of a usage object. Cached input tokens: `prompt_tokens_details.cached_tokens` (OpenAI, Groq, xAI,
 * Kimi K2, Qwen), else a top-level `cached_tokens` (Moonshot's own cache), else DeepSeek's
 * `prompt_cache_hit_tokens`, whose `prompt_cache_miss_tokens` it adds to for the prompt when `prompt_tokens`
 * is absent.
 */
function parseUsage(raw: unknown): Usage | null {
  if (!isRecord(raw)) return null;
  const count = countOf;
  const details = isRecord(raw.prompt_tokens_details) ? raw.prompt_tokens_details : {};
  const [hit, miss] = [count(raw.prompt_cache_hit_tokens), count(raw.prompt_cache_miss_tokens)];
  return {
    promptTokens: count(raw.prompt_tokens) ?? (hit === null || miss === null ? null : hit + miss),
    completionTokens: count(raw.completion_tokens),
    totalTokens: count(raw.total_tokens),
    cachedTokens: count(details.cached_tokens) ?? count(raw.cached_tokens) ?? hit,
  };
}

/** Options of {@linkcode parseCompletion}. */
export interface ParseCompletionOptions {
  /** The model the reply names when the body has none (the one asked for). @default {""} */
  model?: string;
  /** Where the body came from (the provider's host), named in error messages. @default {undefined} */
  source?: string;
  /**
   * Who produced the body (see {@linkcode modelOrigin}): the reply keeps its provider state, tagged with it.
   * @default {null} (provider state is dropped)
   */
  origin?: string | null;
}

/**
 * Reads a parsed non-streaming completion body: `choices[0].message`'s `content` (see {@linkcode contentText};
 * DeepSeek's `""` beside tool calls becomes `null`) and `tool_calls` (a malformed call comes back with its
 * `problem`), usage as reported wherever it is (see {@linkcode reportedUsage}; `null` when absent), `model`
 * (else `options.model`), `choices[0].finish_reason` (`null` unless a non-empty string); with
 * `options.origin`, the provider state the provider needs back ({@linkcode MESSAGE_STATE_FIELDS} of the
 * message, {@linkcode CALL_STATE_FIELDS} of each call) as received. Drops the rest: no reasoning text
 * (`reasoning`, thinking parts) is ever part of the answer. Throws `LlmError` of kind `invalid_response` when
 * there is no choice or no message.
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
  const { origin } = options;
  const where = "choices[0].message";
  const reply = replyFromMessage(message, { usage, model: named, source, where, origin });
  const finish = choices[0].finish_reason;
  return { ...reply, finishReason: typeof finish === "string" && finish !== "" ? finish : null };
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
  const { usage, model = "", source, where = "message", origin = null } = options;
  const rawCalls = message.tool_calls ?? [];
  if (!Array.isArray(rawCalls)) throw invalidResponseError(`${where}.tool_calls is not an array`, source);
  const toolCalls = rawCalls.map(parseToolCall);
  const text = contentText(message.content, { where: `${where}.content`, source });
  const content = text === "" && toolCalls.length > 0 ? null : text;
  const reply: ChatReply = { content, toolCalls, usage: parseUsage(usage), model };
  const providerState = origin === null ? null : stateOf(message, rawCalls, origin);
  if (providerState !== null) reply.providerState = providerState;
  return reply;
}

/** The `fields` of `record` that carry something (not absent, null, `""`, `[]` or `{}`), or null. */
function pickState(record: unknown, fields: readonly string[]): Record<string, unknown> | null {
  if (!isRecord(record)) return null;
  const picked: Record<string, unknown> = {};
  for (const field of fields) {
    const value = record[field];
    const empty = value === undefined || value === null || value === "" ||
      (Array.isArray(value) ? value.length === 0 : isRecord(value) && Object.keys(value).length === 0);
    if (!empty) picked[field] = value;
  }
  return Object.keys(picked).length === 0 ? null : picked;
}

/** A wire message's provider state, frozen all the way (it is sent back as is), or null when it has none. */
function stateOf(
  message: Record<string, unknown>,
  rawCalls: unknown[],
  origin: string,
): ProviderState | null {
  const own = pickState(message, MESSAGE_STATE_FIELDS);
  const calls = rawCalls.map((call) => pickState(call, CALL_STATE_FIELDS));
  if (own === null && calls.every((call) => call === null)) return null;
  const state: ProviderState = { origin };
  if (own !== null) state.message = own;
  if (calls.some((call) => call !== null)) state.calls = calls;
  return deepFreeze(structuredClone(state));
}

/** Options of {@linkcode contentText}. */
export interface ContentTextOptions extends Pick<ParseCompletionOptions, "source"> {
  /** How error messages name the content, e.g. `choices[0].delta.content`. @default {"content"} */
  where?: string;
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
      throw invalidResponseError(`${where}[${i}] is ${jsonType(part)}, not a content part`, source);
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
