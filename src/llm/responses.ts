/**
 * OpenAI Responses (`LLM_API=responses`), mapping only: messages and tools to a stateless request body
 * (`store: false`, reasoning kept as encrypted items the caller sends back), a response object (whole, or
 * assembled from its stream events) to a {@linkcode ChatReply}. Pure; the client does the I/O.
 * @module
 */
import { LlmError } from "../errors.ts";
import type {
  ChatReply,
  Message,
  ProviderState,
  ResponseFormat,
  ToolCall,
  ToolSchema,
  Usage,
} from "../types.ts";
import { deepFreeze, isRecord, jsonType } from "../_json.ts";
import type { BodyOptions, Dialect, ReadOptions, ReadReply, SseEvent, StreamReader } from "./dialect.ts";
import {
  countOf,
  imageDataUrl,
  imagesOf,
  invalidResponseError,
  providerErrorMessage,
  quoteBody,
  toolCallIdOf,
  toolCallOf,
  toWireResponseFormat,
  unknownRole,
} from "./wire.ts";

/** One item of the request's `input`, in the API's shape. */
export type InputItem = Readonly<Record<string, unknown>>;

/** A stable short digest of a cache key (64-bit FNV-1a over its UTF-8, hex), so the key itself is never sent. */
export function cacheKeyHash(key: string): string {
  let hash = 0xcbf29ce484222325n;
  for (const byte of new TextEncoder().encode(key)) {
    hash = ((hash ^ BigInt(byte)) * 0x100000001b3n) & 0xffffffffffffffffn;
  }
  return hash.toString(16).padStart(16, "0");
}

/** The reasoning items an assistant message's provider state keeps, when it goes back to where it came from. */
function reasoningOf(message: Message, origin: string): readonly unknown[] {
  const state = message.providerState;
  if (state?.origin !== origin) return [];
  const reasoning = state.message?.reasoning;
  return Array.isArray(reasoning) ? reasoning : [];
}

/** The input items of one message; throws `TypeError` for a tool message without id or an unknown role. */
function toInputItems(message: Message, index: number, origin: string): InputItem[] {
  const content = message.content ?? "";
  switch (message.role) {
    case "system":
      return [{ role: "system", content }];
    case "user":
    case "runtime": {
      const images = imagesOf(message);
      // The nudge already carries its "[runtime]" prefix; the provider only knows user messages.
      if (images.length === 0) return [{ role: "user", content }];
      // The text first, as the API reference writes it; an empty text part is left out.
      const parts: InputItem[] = content === "" ? [] : [{ type: "input_text", text: content }];
      for (const image of images) {
        parts.push({ type: "input_image", image_url: imageDataUrl(image), detail: "auto" });
      }
      return [{ role: "user", content: parts }];
    }
    case "assistant": {
      const calls = message.toolCalls ?? [];
      // Reasoning goes first: the API wants each reasoning item followed by the item it led to.
      const items: InputItem[] = reasoningOf(message, origin).map((item) => item as InputItem);
      if (content !== "" || calls.length === 0) items.push({ role: "assistant", content });
      for (const { id, name, arguments: args } of calls) {
        items.push({ type: "function_call", call_id: id, name, arguments: args });
      }
      return items;
    }
    case "tool":
      return [{ type: "function_call_output", call_id: toolCallIdOf(message, index), output: content }];
    default:
      throw unknownRole(message, index);
  }
}

/** Chat Completions' `response_format` with its `json_schema` fields one level up, as `text.format` has them. */
function toTextFormat(format: ResponseFormat): Record<string, unknown> {
  const wire = toWireResponseFormat(format);
  return wire.type === "json_object" ? wire : { type: "json_schema", ...wire.json_schema };
}

/**
 * The request body as an object: `model`, `input` (a user message with images as an `input_text` part and
 * an `input_image` part per image), `store: false` with `include` asking for the reasoning's encrypted
 * content (so it can come back without the provider storing anything), `tools` (non-strict, as in Chat
 * Completions; omitted when empty), then `text.format`, `reasoning.effort`, `max_output_tokens`,
 * `prompt_cache_key` (a hash of the key) and `stream` only when set. Throws `TypeError` like the messages do.
 */
export function buildResponsesBody(
  messages: readonly Message[],
  tools: readonly ToolSchema[],
  options: BodyOptions,
): Record<string, unknown> {
  const { model, stream, responseFormat, origin, reasoningEffort, maxOutputTokens, cacheKey } = options;
  const { toolChoice } = options;
  const input = messages.flatMap((message, i) => toInputItems(message, i, origin));
  const body: Record<string, unknown> = {
    model,
    input,
    store: false,
    include: ["reasoning.encrypted_content"],
  };
  if (tools.length > 0) {
    body.tools = tools.map(({ name, description, parameters }) => ({
      type: "function",
      name,
      description,
      parameters,
      strict: false,
    }));
    if (toolChoice === "none") body.tool_choice = "none";
  }
  if (responseFormat !== null) body.text = { format: toTextFormat(responseFormat) };
  if (reasoningEffort !== null) body.reasoning = { effort: reasoningEffort };
  if (maxOutputTokens !== null) body.max_output_tokens = maxOutputTokens;
  if (cacheKey !== null) body.prompt_cache_key = cacheKeyHash(cacheKey);
  if (stream) body.stream = true;
  return body;
}

/** The counts of a Responses `usage` object; null when it is not one. */
function parseUsage(raw: unknown): Usage | null {
  if (!isRecord(raw)) return null;
  const details = isRecord(raw.input_tokens_details) ? raw.input_tokens_details : {};
  return {
    promptTokens: countOf(raw.input_tokens),
    completionTokens: countOf(raw.output_tokens),
    totalTokens: countOf(raw.total_tokens),
    cachedTokens: countOf(details.cached_tokens),
  };
}

/** A `function_call` item as a call; like Chat Completions, one that cannot run keeps its `problem`. */
function parseFunctionCall(item: Record<string, unknown>): ToolCall {
  const id = typeof item.call_id === "string" ? item.call_id : item.id;
  return toolCallOf(id, item.name, item.arguments);
}

/** How a response ended, in Chat Completions' words; a cut-off reply is `length` even with calls. */
function finishReasonOf(response: Record<string, unknown>, calls: number, refused: boolean): string | null {
  if (response.status === "incomplete") {
    const details = isRecord(response.incomplete_details) ? response.incomplete_details : {};
    if (details.reason === "max_output_tokens") return "length";
    if (details.reason === "content_filter") return "content_filter";
    return typeof details.reason === "string" && details.reason !== "" ? details.reason : "length";
  }
  if (calls > 0) return "tool_calls";
  if (refused) return "content_filter";
  return response.status === "completed" ? "stop" : null;
}

/**
 * A response object's `output` as a reply: `message` items' `output_text` parts joined (a `refusal` part's
 * text is the content, ending `content_filter`), `function_call` items as calls, `reasoning` items kept whole
 * in the provider state (with `origin` only), never in the content; other items are ignored.
 */
function replyFromResponse(
  response: Record<string, unknown>,
  output: readonly unknown[],
  options: ReadOptions,
): ChatReply {
  const { source, origin } = options;
  let text: string | null = null;
  let refused = false;
  const toolCalls: ToolCall[] = [];
  const reasoning: unknown[] = [];
  for (const [i, item] of output.entries()) {
    if (!isRecord(item)) throw invalidResponseError(`output[${i}] is ${jsonType(item)}, not an item`, source);
    if (item.type === "function_call") toolCalls.push(parseFunctionCall(item));
    else if (item.type === "reasoning") reasoning.push(item);
    else if (item.type === "message") {
      const parts = item.content ?? [];
      if (!Array.isArray(parts)) throw invalidResponseError(`output[${i}].content is not an array`, source);
      for (const [j, part] of parts.entries()) {
        const where = `output[${i}].content[${j}]`;
        if (!isRecord(part)) throw invalidResponseError(`${where} is ${jsonType(part)}, not a part`, source);
        const field = part.type === "output_text" ? "text" : part.type === "refusal" ? "refusal" : null;
        if (field === null) continue;
        if (typeof part[field] !== "string") {
          throw invalidResponseError(`${where} is a ${part.type} part without a string "${field}"`, source);
        }
        refused ||= field === "refusal";
        text = (text ?? "") + part[field];
      }
    }
  }
  const model = typeof response.model === "string" && response.model !== "" ? response.model : options.model;
  const reply: ChatReply = {
    content: text === "" && toolCalls.length > 0 ? null : text,
    toolCalls,
    usage: parseUsage(response.usage),
    model,
    finishReason: finishReasonOf(response, toolCalls.length, refused),
  };
  if (origin !== null && reasoning.length > 0) {
    const state: ProviderState = { origin, message: { reasoning } };
    reply.providerState = deepFreeze(structuredClone(state));
  }
  return reply;
}

/** The provider's message of a failed response's `error`, else its code, else a placeholder. */
function failureText(error: unknown): string {
  if (!isRecord(error)) return "no error was given";
  const message = typeof error.message === "string" && error.message !== "" ? error.message : null;
  const code = typeof error.code === "string" && error.code !== "" ? error.code : null;
  return [code, message].filter((part) => part !== null).join(": ") || "no error was given";
}

/**
 * Reads a whole response body. Throws `LlmError` of kind `invalid_response` for a body that is not a
 * response, a `failed` one (naming the provider's message), or one without an `output` array.
 */
export function readResponse(body: unknown, options: ReadOptions): ReadReply {
  const { source } = options;
  if (!isRecord(body)) throw invalidResponseError("body is not a JSON object", source);
  if (body.status === "failed") {
    throw invalidResponseError(`the response failed: ${quoteBody(failureText(body.error))}`, source);
  }
  if (!Array.isArray(body.output)) {
    // Some gateways answer 200 with an error object instead of a response.
    const detail = providerErrorMessage(body);
    const said = detail === null ? "" : ` (provider said: ${quoteBody(detail)})`;
    throw invalidResponseError(`"output" is missing or not an array${said}`, source);
  }
  return { reply: replyFromResponse(body, body.output, options), id: body.id };
}

/** Error codes a retry may cure, with the status their HTTP answer would have had. */
const RETRYABLE_CODES: Readonly<Record<string, number>> = {
  rate_limit_exceeded: 429,
  server_error: 500,
  server_is_overloaded: 503,
  slow_down: 503,
};

/** A whole output item, as the stream has given it so far (an added item, then its deltas, then its done). */
type StreamedItem = Record<string, unknown>;

/**
 * Builds a reply from a Responses stream, reading each event by its `type` (the `event:` name repeats it):
 * `response.output_text.delta` (answer text, returned), `response.refusal.delta`, the function calls'
 * `response.output_item.added`, `response.function_call_arguments.delta`/`.done` and `.output_item.done`,
 * reasoning items (kept as `output_item.done` gives them), reasoning text deltas (counted, never kept), and
 * `response.completed`/`response.incomplete`, whose response object ends the stream and whose `output` is
 * preferred for the reply. `response.failed` and `error` throw; other events are ignored.
 */
export class ResponsesStreamReader implements StreamReader {
  #options: ReadOptions;
  /** The output items by `output_index`. */
  #items = new Map<number, StreamedItem>();
  #byId = new Map<string, StreamedItem>();
  #response: Record<string, unknown> | null = null;
  #final: Record<string, unknown> | null = null;
  #finishReason: string | null = null;
  #id: string | null = null;
  #reasoningChunks = 0;
  #seen = false;

  constructor(options: ReadOptions) {
    this.#options = options;
  }

  /** What a stream that ends before it is complete lacked. */
  readonly missing = "without response.completed";

  /** `response.completed` or `response.incomplete` has arrived: later events are not read. */
  get done(): boolean {
    return this.#final !== null;
  }

  /** The stream said how it ended. */
  get complete(): boolean {
    return this.#final !== null;
  }

  /** Reasoning text deltas that have arrived (summary or full), never their text. */
  get reasoningChunks(): number {
    return this.#reasoningChunks;
  }

  /** How the reply ended, once the final response object has arrived. */
  get finishReason(): string | null {
    return this.#finishReason;
  }

  /** The response's `id`, from the first event whose response object carried one. */
  get responseId(): string | null {
    return this.#id;
  }

  /** Reads one event, returning the answer text it added; throws `LlmError` (see the dialect's contract). */
  add(event: SseEvent): string {
    if (this.done) return "";
    const data = event.data.trim();
    if (data === "" || data === "[DONE]") return "";
    let parsed: unknown;
    try {
      parsed = JSON.parse(data);
    } catch {
      if (event.event === "error") throw this.#failed(null, data);
      throw this.#invalid(`stream data is not JSON: ${quoteBody(data)}`);
    }
    if (!isRecord(parsed)) throw this.#invalid("stream event is not a JSON object");
    const type = typeof parsed.type === "string" ? parsed.type : event.event;
    return this.#event(type, parsed);
  }

  /** The reply so far: the final response's output, else the items the events built. */
  reply(): ChatReply {
    const response = this.#final ?? this.#response ?? {};
    const output = Array.isArray(response.output) && response.output.length > 0
      ? response.output
      : [...this.#items.entries()].sort(([a], [b]) => a - b).map(([, item]) => item);
    if (!this.#seen && output.length === 0) throw this.#invalid("the stream carried no response events");
    return replyFromResponse(response, output, this.#options);
  }

  #event(type: string | null, data: Record<string, unknown>): string {
    switch (type) {
      case "response.created":
      case "response.in_progress":
        this.#noteResponse(data.response);
        return "";
      case "response.output_item.added":
      case "response.output_item.done":
        this.#item(data, type.endsWith(".done"));
        return "";
      case "response.output_text.delta":
      case "response.refusal.delta":
        return this.#text(data, type === "response.refusal.delta" ? "refusal" : "output_text");
      case "response.function_call_arguments.delta":
      case "response.function_call_arguments.done": {
        const call = this.#find(data) ?? this.#at(data, { type: "function_call", arguments: "" });
        const done = type.endsWith(".done");
        if (done && typeof data.arguments === "string") call.arguments = data.arguments;
        if (!done && typeof data.delta === "string") {
          call.arguments = String(call.arguments ?? "") + data.delta;
        }
        return "";
      }
      case "response.reasoning_summary_text.delta":
      case "response.reasoning_text.delta":
        this.#reasoningChunks++;
        return "";
      case "response.completed":
      case "response.incomplete": {
        if (!isRecord(data.response)) throw this.#invalid(`${type} carries no response object`);
        this.#noteResponse(data.response);
        this.#final = data.response;
        this.#finishReason = this.reply().finishReason ?? null;
        return "";
      }
      case "response.failed": {
        const response = isRecord(data.response) ? data.response : {};
        throw this.#failed(isRecord(response.error) ? response.error : null, failureText(response.error));
      }
      case "error": {
        // The reference puts `code` and `message` on the event; some servers nest them in `error`.
        const error = isRecord(data.error) ? data.error : data;
        throw this.#failed(error, failureText(error));
      }
      default:
        return "";
    }
  }

  #noteResponse(response: unknown): void {
    if (!isRecord(response)) return;
    this.#seen = true;
    this.#response = response;
    if (this.#id === null && typeof response.id === "string" && response.id !== "") this.#id = response.id;
  }

  #item(data: Record<string, unknown>, done: boolean): void {
    if (!isRecord(data.item)) throw this.#invalid("an output item event carries no item");
    const known = this.#find({ ...data, item_id: data.item.id });
    // An added call has empty arguments; the deltas fill them in, its done item has them whole.
    const item: StreamedItem = { ...data.item };
    if (!done && known !== undefined && typeof known.arguments === "string" && item.arguments === "") {
      item.arguments = known.arguments;
    }
    this.#put(data, item);
  }

  #text(data: Record<string, unknown>, type: "output_text" | "refusal"): string {
    if (typeof data.delta !== "string") throw this.#invalid(`response.${type} delta is not a string`);
    const message = this.#find(data) ?? this.#at(data, { type: "message", role: "assistant", content: [] });
    const field = type === "output_text" ? "text" : "refusal";
    const parts = Array.isArray(message.content) ? [...message.content] : [];
    const last = parts.at(-1);
    if (isRecord(last) && last.type === type) {
      parts[parts.length - 1] = { ...last, [field]: String(last[field] ?? "") + data.delta };
    } else parts.push({ type, [field]: data.delta });
    message.content = parts;
    return type === "output_text" ? data.delta : "";
  }

  /** The item an event names, by `item_id`, else by `output_index`. */
  #find(data: Record<string, unknown>): StreamedItem | undefined {
    const byId = typeof data.item_id === "string" ? this.#byId.get(data.item_id) : undefined;
    const index = data.output_index;
    return byId ?? (typeof index === "number" ? this.#items.get(index) : undefined);
  }

  /** A new item where the event says (a server that skipped `output_item.added`). */
  #at(data: Record<string, unknown>, item: StreamedItem): StreamedItem {
    if (typeof data.item_id === "string") item.id = data.item_id;
    this.#put(data, item);
    return item;
  }

  #put(data: Record<string, unknown>, item: StreamedItem): void {
    const index = typeof data.output_index === "number" ? data.output_index : this.#items.size;
    this.#seen = true;
    this.#items.set(index, item);
    if (typeof item.id === "string") this.#byId.set(item.id, item);
  }

  #invalid(reason: string): LlmError {
    return invalidResponseError(reason, this.#options.source);
  }

  /** A provider's error event: `http` with a status when a retry may cure it, else `invalid_response`. */
  #failed(error: Record<string, unknown> | null, text: string): LlmError {
    const code = typeof error?.code === "string" ? error.code : "";
    const status = RETRYABLE_CODES[code];
    const reason = `the provider sent an error mid-stream: ${quoteBody(text)}`;
    if (status === undefined) return this.#invalid(reason);
    const from = this.#options.source === undefined ? "" : ` from ${this.#options.source}`;
    return new LlmError(`LLM stream${from} failed: ${quoteBody(text)}`, { kind: "http", status });
  }
}

/** OpenAI Responses: `POST {baseUrl}/responses` with a bearer key. */
export const OPENAI_RESPONSES: Dialect = {
  path: "/responses",
  modelsPath: "/models",
  headers: {},
  auth: (apiKey) => ({ Authorization: `Bearer ${apiKey}` }),
  body: (messages, tools, options) => JSON.stringify(buildResponsesBody(messages, tools, options)),
  read: readResponse,
  stream: (options) => new ResponsesStreamReader(options),
};
