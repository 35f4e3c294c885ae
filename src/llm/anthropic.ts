/**
 * Anthropic Messages (`LLM_API=anthropic`): `POST {baseUrl}/v1/messages` with `x-api-key` and
 * `anthropic-version`. Leading system messages become `system` blocks, a user message's images `image` blocks
 * (base64 sources) before its text, tool calls `tool_use` blocks, a step's results `tool_result` blocks of one
 * user message; thinking blocks go back unchanged, and only to the origin that sent them; `cache_control`
 * marks where the prefix is stable. Pure; the client does the I/O.
 * @module
 */
import { LlmError } from "../errors.ts";
import { deepFreeze, isRecord, jsonType } from "../_json.ts";
import type {
  ChatReply,
  Message,
  ProviderState,
  ResponseFormat,
  ToolCall,
  ToolSchema,
  Usage,
} from "../types.ts";
import type { BodyOptions, Dialect, ReadOptions, SseEvent, StreamReader } from "./dialect.ts";
import {
  countOf,
  imagesOf,
  invalidResponseError,
  providerErrorMessage,
  quoteBody,
  toolCallIdOf,
  toolCallOf,
  unknownRole,
} from "./wire.ts";

/** The API version every request names. */
export const ANTHROPIC_VERSION = "2023-06-01";

/** `max_tokens` when AGENT_MAX_OUTPUT_TOKENS is unset (the API requires one), plus the thinking budget. */
export const DEFAULT_MAX_TOKENS = 8192;

/**
 * The tool a structured answer is asked through: the model must call a tool (this one, or one of its own),
 * and this one's input is the answer. No runtime tool has the name.
 */
export const ANSWER_TOOL = "structured_answer";

/** Where a request's prefix stays the same from one request to the next: at most 4, as the API allows. */
const EPHEMERAL = Object.freeze({ type: "ephemeral" });

/** The [RUNTIME CONTEXT] block of a summary starts so (see `agent/context.ts`). */
const RUNTIME_CONTEXT = "[RUNTIME CONTEXT]";

type Block = Record<string, unknown>;
interface WireMessage {
  role: "user" | "assistant";
  content: Block[];
}

/** Ids the API accepts (`^[a-zA-Z0-9_-]+$`); another provider's may hold other characters. */
function wireId(id: string): string {
  return id.replace(/[^A-Za-z0-9_-]/g, "_") || "call";
}

function textBlock(text: string): Block {
  return { type: "text", text };
}

/** A call's arguments as the object `input` must be: `{}` for text that is not a JSON object. */
function inputOf(args: string): Record<string, unknown> {
  try {
    const parsed = JSON.parse(args);
    return isRecord(parsed) ? parsed : {};
  } catch {
    return {};
  }
}

/** Whether a stored tool result says it failed (`{"ok": false, ...}`): sent as `is_error`. */
function failedResult(content: string): boolean {
  try {
    const parsed = JSON.parse(content);
    return isRecord(parsed) && parsed.ok === false;
  } catch {
    return false;
  }
}

/** The blocks of one runtime message; the thinking of its provider state only when it goes back there. */
function blocksOf(message: Message, index: number, origin: string): WireMessage | null {
  const content = message.content ?? "";
  const images = imagesOf(message);
  switch (message.role) {
    case "system":
    case "user":
    case "runtime": {
      // Images before the text, as Anthropic's vision guide advises; then no empty text is needed.
      const blocks: Block[] = images.map(({ mediaType, data }) => ({
        type: "image",
        source: { type: "base64", media_type: mediaType, data },
      }));
      // A system message within the history (recalled memory) is data the user turn carries.
      if (content !== "" || blocks.length === 0) blocks.push(textBlock(content === "" ? " " : content));
      return { role: "user", content: blocks };
    }
    case "assistant": {
      const state = message.providerState?.origin === origin ? message.providerState : undefined;
      const thinking = state?.message?.thinking;
      const blocks: Block[] = Array.isArray(thinking) ? thinking.map((block) => ({ ...block })) : [];
      if (content.trim() !== "") blocks.push(textBlock(content));
      for (const call of message.toolCalls ?? []) {
        blocks.push({
          type: "tool_use",
          id: wireId(call.id),
          name: call.name,
          input: inputOf(call.arguments),
        });
      }
      return blocks.length === 0 ? null : { role: "assistant", content: blocks };
    }
    case "tool": {
      const result: Block = {
        type: "tool_result",
        tool_use_id: wireId(toolCallIdOf(message, index)),
        content,
      };
      if (failedResult(content)) result.is_error = true;
      return { role: "user", content: [result] };
    }
    default:
      throw unknownRole(message, index);
  }
}

/** A request's `system` blocks and messages, consecutive turns of one role merged (results first). */
function split(messages: readonly Message[], origin: string) {
  const system: Block[] = [];
  const wire: WireMessage[] = [];
  /** The wire message holding the end of the previous turn: the message before the last user message. */
  let previousTurnEnd = -1;
  // The turn starts at the last user message, or at the recalled memory just before it.
  let turnStart = messages.findLastIndex((m) => m.role === "user");
  while (turnStart > 0 && messages[turnStart - 1].role === "system") turnStart--;
  let leading = true;
  for (const [i, message] of messages.entries()) {
    if (leading && message.role === "system") {
      system.push(textBlock(message.content ?? ""));
      continue;
    }
    leading = false;
    const next = blocksOf(message, i, origin);
    if (next !== null) {
      const last = wire.at(-1);
      if (last?.role === next.role) {
        last.content.push(...next.content);
        // The API reads a user turn's tool results first.
        last.content.sort((a, b) => Number(b.type === "tool_result") - Number(a.type === "tool_result"));
      } else wire.push(next);
    }
    if (i === turnStart - 1) previousTurnEnd = wire.length - 1;
  }
  return { system, wire, previousTurnEnd };
}

/** Marks the last block of `blocks` as a cache breakpoint. */
function mark(blocks: Block[] | undefined): void {
  const last = blocks?.at(-1);
  if (last !== undefined) last.cache_control = EPHEMERAL;
}

/** The tools, with the answer tool of a structured answer. */
/**
 * Whether `model` has structured outputs (`output_config.format`): Claude Opus, Sonnet and Haiku 4.5 and
 * later, by the model id's family and version (`claude-sonnet-4-5-20250929`, `claude-opus-4-6`, a Bedrock
 * `anthropic.claude-haiku-4-5-…`). Earlier models are asked through the answer tool.
 */
export function hasStructuredOutputs(model: string): boolean {
  const found = /claude-(?:opus|sonnet|haiku)-(\d+)(?:-(\d{1,2})(?![\d]))?/.exec(model);
  if (found === null) return false;
  const [major, minor] = [Number(found[1]), Number(found[2] ?? 0)];
  return major > 4 || (major === 4 && minor >= 5);
}

/** Keywords structured outputs do not take: the runtime checks them once the answer is back. */
const UNCONSTRAINED = new Set([
  "minimum",
  "maximum",
  "exclusiveMinimum",
  "exclusiveMaximum",
  "multipleOf",
  "minLength",
  "maxLength",
  "maxItems",
  "uniqueItems",
  "minProperties",
  "maxProperties",
]);

/**
 * A schema as structured outputs take it, or null when they cannot: every object closed
 * (`additionalProperties: false`, which an object that leaves it unset gets), no `$ref` (a recursive schema
 * is refused), and without the constraints of {@linkcode UNCONSTRAINED} (`minItems` above 1 too), which the
 * runtime's own check of the answer still applies. An object open to other properties is left to the tool.
 */
export function outputSchema(schema: unknown): Record<string, unknown> | null {
  if (Array.isArray(schema)) {
    const items = schema.map(outputSchema);
    return items.includes(null) ? null : items as unknown as Record<string, unknown>;
  }
  if (!isRecord(schema)) return schema as Record<string, unknown>;
  if ("$ref" in schema) return null;
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(schema)) {
    if (UNCONSTRAINED.has(key) || (key === "minItems" && typeof value === "number" && value > 1)) continue;
    if (key === "properties" && isRecord(value)) {
      const properties: Record<string, unknown> = {};
      for (const [name, property] of Object.entries(value)) {
        const inner = outputSchema(property);
        if (inner === null) return null;
        properties[name] = inner;
      }
      out.properties = properties;
    } else if (key === "const" || key === "enum" || key === "default" || key === "examples") {
      out[key] = value;
    } else if (typeof value === "object" && value !== null) {
      const inner = outputSchema(value);
      if (inner === null) return null;
      out[key] = inner;
    } else out[key] = value;
  }
  const object = out.type === "object" || (Array.isArray(out.type) && out.type.includes("object")) ||
    "properties" in out;
  if (object) {
    if (out.additionalProperties === undefined) out.additionalProperties = false;
    else if (out.additionalProperties !== false) return null;
  }
  return out;
}

function toolsOf(tools: readonly ToolSchema[], format: ResponseFormat | null): Block[] {
  const wire: Block[] = tools.map(({ name, description, parameters }) => ({
    name,
    description,
    input_schema: parameters,
  }));
  if (format !== null) {
    const schema = format.type === "json_schema" ? format.schema : { type: "object" };
    const description = format.type === "json_schema" && format.description !== undefined
      ? format.description
      : "Give the final answer as this tool's input.";
    wire.push({ name: ANSWER_TOOL, description, input_schema: schema });
  }
  return wire;
}

/**
 * The request body. Breakpoints: the last system block before the summary (the tools and the system prompt),
 * the summary, the last message of the previous turn, the request's last message.
 */
function body(messages: readonly Message[], tools: readonly ToolSchema[], options: BodyOptions): string {
  const { model, stream, responseFormat, origin, thinkingBudget, maxOutputTokens, toolChoice } = options;
  const { system, wire, previousTurnEnd } = split(messages, origin);
  const summary = system.findIndex((block) => String(block.text).startsWith(RUNTIME_CONTEXT));
  if (summary > 0) mark(system.slice(0, summary));
  mark(system);
  if (previousTurnEnd >= 0 && previousTurnEnd < wire.length - 1) mark(wire[previousTurnEnd].content);
  mark(wire.at(-1)?.content);
  const request: Record<string, unknown> = {
    model,
    max_tokens: maxOutputTokens ?? DEFAULT_MAX_TOKENS + (thinkingBudget ?? 0),
  };
  if (system.length > 0) request.system = system;
  request.messages = wire;
  // A schema the model's structured outputs take is asked so; anything else through the answer tool.
  const native = responseFormat?.type === "json_schema" && hasStructuredOutputs(model)
    ? outputSchema(responseFormat.schema)
    : null;
  const toolFormat = native === null ? responseFormat : null;
  const wireTools = toolsOf(tools, toolFormat);
  if (wireTools.length > 0) request.tools = wireTools;
  // Thinking takes only `auto` or `none`: the answer tool is then asked for by the format's system block alone.
  if (wireTools.length > 0 && toolChoice === "none") request.tool_choice = { type: "none" };
  else if (toolFormat !== null && thinkingBudget === null) request.tool_choice = { type: "any" };
  if (native !== null) request.output_config = { format: { type: "json_schema", schema: native } };
  if (thinkingBudget !== null) request.thinking = { type: "enabled", budget_tokens: thinkingBudget };
  if (stream) request.stream = true;
  return JSON.stringify(request);
}

/** The reply's finish reason in Chat Completions' words; `pause_turn` (server tools only) is cut off. */
function finishReasonOf(stop: unknown, calls: number): string | null {
  switch (stop) {
    case "end_turn":
    case "stop_sequence":
      return calls > 0 ? "tool_calls" : "stop";
    case "tool_use":
      return "tool_calls";
    case "max_tokens":
    case "model_context_window_exceeded":
    case "pause_turn":
      return "length";
    case "refusal":
      return "content_filter";
    default:
      return typeof stop === "string" && stop !== "" ? stop : null;
  }
}

/** The counts of a usage object: the prompt is the uncached, written and read input tokens together. */
function usageOf(raw: unknown): Usage | null {
  if (!isRecord(raw)) return null;
  const input = countOf(raw.input_tokens);
  const written = countOf(raw.cache_creation_input_tokens);
  const read = countOf(raw.cache_read_input_tokens);
  const output = countOf(raw.output_tokens);
  const promptTokens = input === null ? null : input + (written ?? 0) + (read ?? 0);
  return {
    promptTokens,
    completionTokens: output,
    totalTokens: promptTokens === null || output === null ? null : promptTokens + output,
    cachedTokens: read,
    cacheWriteTokens: written,
  };
}

/** A reply from a message's content blocks: text joined, calls in order, thinking kept as provider state. */
function replyOf(
  blocks: readonly Block[],
  args: readonly string[],
  fields: { usage: unknown; model: string; stop: unknown },
  options: ReadOptions,
): ChatReply {
  let text: string | null = null;
  const calls: ToolCall[] = [];
  const thinking: Block[] = [];
  let answer: string | null = null;
  for (const [i, block] of blocks.entries()) {
    if (block.type === "text" && typeof block.text === "string") text = (text ?? "") + block.text;
    else if (block.type === "thinking" || block.type === "redacted_thinking") thinking.push(block);
    else if (block.type === "tool_use" && block.name === ANSWER_TOOL) answer = args[i];
    else if (block.type === "tool_use") calls.push(toolCallOf(block.id, block.name, args[i]));
  }
  // A structured answer is the answer tool's input, unless the model also called its own tools.
  if (answer !== null && calls.length === 0) text = answer;
  const content = (text === "" || text === null) && calls.length > 0 ? null : text;
  const reply: ChatReply = {
    content,
    toolCalls: calls,
    usage: usageOf(fields.usage),
    model: fields.model,
    finishReason: finishReasonOf(
      answer !== null && calls.length === 0 ? "end_turn" : fields.stop,
      calls.length,
    ),
  };
  if (options.origin !== null && thinking.length > 0) {
    const state: ProviderState = { origin: options.origin, message: { thinking } };
    reply.providerState = deepFreeze(structuredClone(state));
  }
  return reply;
}

/** The error a provider's `{"type": "error"}` names: its status when a retry may cure it. */
function errorOf(body: unknown, source: string): LlmError {
  const detail = providerErrorMessage(body) ?? quoteBody(JSON.stringify(body));
  const type = isRecord(body) && isRecord(body.error) ? body.error.type : undefined;
  const status = type === "overloaded_error"
    ? 529
    : type === "rate_limit_error"
    ? 429
    : type === "api_error"
    ? 500
    : null;
  const message = `Invalid LLM response from ${source}: the provider sent an error mid-stream: ${
    quoteBody(detail)
  }`;
  if (status === null) return new LlmError(message, { kind: "invalid_response" });
  return new LlmError(`LLM request failed: ${String(type)} from ${source}: ${quoteBody(detail)}`, {
    kind: "http",
    status,
  });
}

function read(body: unknown, options: ReadOptions): { reply: ChatReply; id: unknown } {
  const { source } = options;
  if (!isRecord(body)) throw invalidResponseError("body is not a JSON object", source);
  if (!Array.isArray(body.content)) {
    const detail = providerErrorMessage(body);
    const said = detail === null ? "" : ` (provider said: ${detail})`;
    throw invalidResponseError(`"content" is missing or not an array${said}`, source);
  }
  const blocks: Block[] = [];
  const args: string[] = [];
  for (const [i, block] of body.content.entries()) {
    if (!isRecord(block)) {
      throw invalidResponseError(`content[${i}] is ${jsonType(block)}, not a block`, source);
    }
    blocks.push(block);
    args.push(block.type === "tool_use" ? JSON.stringify(isRecord(block.input) ? block.input : {}) : "");
  }
  const model = typeof body.model === "string" && body.model !== "" ? body.model : options.model;
  return {
    reply: replyOf(blocks, args, { usage: body.usage, model, stop: body.stop_reason }, options),
    id: body.id,
  };
}

/** A streamed message: blocks built from `content_block_*` events, usage from `message_start` and `_delta`. */
class MessagesReader implements StreamReader {
  readonly missing = "without message_stop or a stop_reason";
  #options: ReadOptions;
  #blocks: Block[] = [];
  #args: string[] = [];
  #usage: Record<string, unknown> = {};
  #model: string | undefined;
  #id: string | null = null;
  #stop: unknown = null;
  #started = false;
  #done = false;
  #reasoningChunks = 0;

  constructor(options: ReadOptions) {
    this.#options = options;
  }

  get done(): boolean {
    return this.#done;
  }

  get complete(): boolean {
    return this.#done || this.#stop !== null;
  }

  get reasoningChunks(): number {
    return this.#reasoningChunks;
  }

  get finishReason(): string | null {
    const uses = this.#blocks.filter((b) => b?.type === "tool_use");
    const calls = uses.filter((b) => b.name !== ANSWER_TOOL).length;
    // A structured answer (the answer tool alone) ends the reply as an answer does.
    const answered = calls === 0 && uses.length > 0;
    return this.#stop === null ? null : finishReasonOf(answered ? "end_turn" : this.#stop, calls);
  }

  get responseId(): string | null {
    return this.#id;
  }

  add(event: SseEvent): string {
    if (this.#done) return "";
    const source = this.#options.source;
    let data: unknown;
    try {
      data = JSON.parse(event.data);
    } catch {
      throw invalidResponseError(`stream data is not JSON: ${quoteBody(event.data)}`, source);
    }
    if (!isRecord(data)) throw invalidResponseError("stream event is not a JSON object", source);
    switch (data.type) {
      case "message_start": {
        const message = isRecord(data.message) ? data.message : {};
        this.#started = true;
        if (typeof message.id === "string") this.#id = message.id;
        if (typeof message.model === "string" && message.model !== "") this.#model = message.model;
        if (isRecord(message.usage)) Object.assign(this.#usage, message.usage);
        return "";
      }
      case "content_block_start":
        this.#blocks[this.#index(data)] = isRecord(data.content_block) ? { ...data.content_block } : {};
        this.#args[this.#index(data)] = "";
        return "";
      case "content_block_delta":
        return this.#delta(this.#index(data), isRecord(data.delta) ? data.delta : {});
      case "message_delta": {
        const delta = isRecord(data.delta) ? data.delta : {};
        if (typeof delta.stop_reason === "string") this.#stop = delta.stop_reason;
        // Its counts are cumulative: they replace those of message_start.
        if (isRecord(data.usage)) {
          for (const [key, value] of Object.entries(data.usage)) if (value !== null) this.#usage[key] = value;
        }
        return "";
      }
      case "message_stop":
        this.#done = true;
        return "";
      case "error":
        throw errorOf(data, source);
      default:
        // `ping`, `content_block_stop` and later event types add nothing.
        return "";
    }
  }

  reply(): ChatReply {
    if (!this.#started) {
      throw invalidResponseError("the stream carried no message_start", this.#options.source);
    }
    const blocks = this.#blocks.filter((block) => block !== undefined);
    const args = this.#blocks.map((block, i) =>
      block?.type === "tool_use" ? (this.#args[i] === "" ? "{}" : this.#args[i]) : ""
    ).filter((_, i) => this.#blocks[i] !== undefined);
    for (const block of blocks) delete block.input;
    const model = this.#model ?? this.#options.model;
    return replyOf(blocks, args, { usage: this.#usage, model, stop: this.#stop }, this.#options);
  }

  #index(data: Record<string, unknown>): number {
    const index = data.index;
    if (typeof index === "number" && Number.isInteger(index) && index >= 0 && index < 1024) return index;
    throw invalidResponseError(
      `stream event index is not a whole number: ${String(index)}`,
      this.#options.source,
    );
  }

  #delta(index: number, delta: Record<string, unknown>): string {
    const block = this.#blocks[index];
    if (block === undefined) {
      throw invalidResponseError(
        `content_block_delta for block ${index} before its start`,
        this.#options.source,
      );
    }
    switch (delta.type) {
      case "text_delta": {
        const text = typeof delta.text === "string" ? delta.text : "";
        block.text = String(block.text ?? "") + text;
        // A structured answer's text is shown once checked, so nothing of a tool's input is passed on.
        return text;
      }
      case "input_json_delta":
        if (typeof delta.partial_json === "string") this.#args[index] += delta.partial_json;
        return "";
      case "thinking_delta":
        this.#reasoningChunks++;
        if (typeof delta.thinking === "string") {
          block.thinking = String(block.thinking ?? "") + delta.thinking;
        }
        return "";
      case "signature_delta":
        if (typeof delta.signature === "string") {
          block.signature = String(block.signature ?? "") + delta.signature;
        }
        return "";
      default:
        return "";
    }
  }
}

/** Anthropic Messages (`LLM_API=anthropic`): `POST {baseUrl}/v1/messages`. */
export const ANTHROPIC_MESSAGES: Dialect = {
  path: "/v1/messages",
  modelsPath: "/v1/models",
  headers: { "anthropic-version": ANTHROPIC_VERSION },
  auth: (apiKey) => ({ "x-api-key": apiKey }),
  body,
  read,
  stream: (options) => new MessagesReader(options),
};
