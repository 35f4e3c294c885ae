/**
 * The fake providers' three wire formats (`LLM_API`): a Messages or Responses request read as the role and
 * text messages the rule-based fakes answer, a decision written back as each API's whole body or event stream
 * (in the published shapes), and the providers' prompt-cache rules, so the fakes report cached tokens as the
 * real ones would. Pure but for {@linkcode PromptCache}'s memory.
 * @module
 */

/** The wire formats, as `LLM_API` names them. */
export type Api = "chat" | "anthropic" | "responses";

/** A request message as the rules read it: a role and its text (a tool result's JSON). */
export type RuleMessage = {
  role: string;
  content: string | null;
  /** An assistant message's calls. */
  calls?: { name: string; arguments: string }[];
  /** How many images came with the text (absent: none). */
  images?: number;
};

/** A reply to write: its text, its calls. */
export interface WireDecision {
  content: string | null;
  calls: { id: string; name: string; arguments: string }[];
}

/** Token counts of one reply, as the provider reports them. */
export interface WireUsage {
  /** Prompt tokens in all, cached and written ones included. */
  input: number;
  output: number;
  /** Read from the cache. */
  read: number;
  /** Written to the cache (Messages only). */
  written: number;
}

/** The path each API posts to, under `/v1`. */
export const API_PATHS: Readonly<Record<Api, string>> = {
  chat: "/v1/chat/completions",
  anthropic: "/v1/messages",
  responses: "/v1/responses",
};

type Block = Record<string, unknown>;

function text(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content.filter((b) => typeof b?.text === "string").map((b) => b.text).join("\n");
}

/** `message` with `images` when there are any: a message without keeps the shape it always had. */
function withImages(message: RuleMessage, images: number): RuleMessage {
  return images === 0 ? message : { ...message, images };
}

/** How many of a message's content parts are of `type` (none for a text content). */
function countParts(content: unknown, type: string): number {
  return Array.isArray(content) ? content.filter((part) => part?.type === type).length : 0;
}

/**
 * A request body's messages as the rules read them, whatever its API: a user message's image parts (Chat
 * Completions' `image_url`, Messages' `image` blocks before the text they go with, Responses' `input_image`)
 * counted as its `images`.
 */
export function ruleMessages(api: Api, body: Record<string, unknown>): RuleMessage[] {
  if (api === "chat") {
    const wire = (body.messages ?? []) as {
      role: string;
      content: string | null | Block[];
      tool_calls?: { function: Block }[];
    }[];
    return wire.map(({ role, content: raw, tool_calls }) => {
      const content = Array.isArray(raw) ? text(raw) : raw;
      const calls = tool_calls?.map(({ function: f }) => ({
        name: String(f.name),
        arguments: String(f.arguments),
      }));
      const message = calls === undefined ? { role, content } : { role, content, calls };
      return withImages(message, countParts(raw, "image_url"));
    });
  }
  const messages: RuleMessage[] = [];
  if (api === "anthropic") {
    if (Array.isArray(body.system)) messages.push({ role: "system", content: text(body.system) });
    for (const message of (body.messages ?? []) as { role: string; content: Block[] }[]) {
      // Images go before the text they come with.
      let images = 0;
      for (const block of message.content) {
        if (block.type === "tool_result") messages.push({ role: "tool", content: text(block.content) });
        else if (block.type === "image") images++;
        else if (block.type === "text") {
          messages.push(withImages({ role: message.role, content: String(block.text) }, images));
          images = 0;
        } else if (block.type === "tool_use") {
          const calls = [{ name: String(block.name), arguments: JSON.stringify(block.input) }];
          messages.push({ role: "assistant", content: null, calls });
        }
      }
      if (images > 0) messages.push({ role: message.role, content: "", images });
    }
    return messages;
  }
  for (const item of (body.input ?? []) as Block[]) {
    if (item.type === "function_call_output") messages.push({ role: "tool", content: String(item.output) });
    else if (item.type === "function_call") {
      const calls = [{ name: String(item.name), arguments: String(item.arguments) }];
      messages.push({ role: "assistant", content: null, calls });
    } else if (typeof item.role === "string") {
      const role = item.role === "developer" ? "system" : item.role;
      messages.push(
        withImages({ role, content: text(item.content) }, countParts(item.content, "input_image")),
      );
    }
  }
  return messages;
}

const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** Whether `data` is standard base64 with its padding, as the providers decode an image's bytes. */
export function isBase64(data: string): boolean {
  return data !== "" && BASE64.test(data);
}

/** The leading bytes of each image format the providers take, as they tell one from another. */
const SIGNATURES: readonly [string, (bytes: Uint8Array) => boolean][] = [
  ["image/png", (b) => [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a].every((x, i) => b[i] === x)],
  ["image/jpeg", (b) => b[0] === 0xff && b[1] === 0xd8 && b[2] === 0xff],
  ["image/gif", (b) => /^GIF8[79]a/.test(String.fromCharCode(...b.slice(0, 6)))],
  ["image/webp", (b) => /^RIFF....WEBP/s.test(String.fromCharCode(...b.slice(0, 12)))],
];

/** The image format base64 `data` holds, by its leading bytes; null when it is none of them, or not base64. */
export function imageTypeOf(data: string): string | null {
  if (!isBase64(data)) return null;
  const head = atob(data.slice(0, 16));
  const bytes = Uint8Array.from(head, (c) => c.charCodeAt(0));
  return SIGNATURES.find(([, matches]) => matches(bytes))?.[0] ?? null;
}

function anthropicMessage(model: string, decision: WireDecision, usage: WireUsage, id: string) {
  const content: Block[] = [];
  if (decision.content !== null) content.push({ type: "text", text: decision.content });
  for (const call of decision.calls) {
    content.push({ type: "tool_use", id: call.id, name: call.name, input: JSON.parse(call.arguments) });
  }
  return {
    id,
    type: "message",
    role: "assistant",
    model,
    content,
    stop_reason: decision.calls.length > 0 ? "tool_use" : "end_turn",
    stop_sequence: null,
    usage: {
      input_tokens: usage.input - usage.read - usage.written,
      cache_creation_input_tokens: usage.written,
      cache_read_input_tokens: usage.read,
      output_tokens: usage.output,
    },
  };
}

function responsesBody(model: string, decision: WireDecision, usage: WireUsage, id: string) {
  const output: Block[] = [];
  if (decision.content !== null) {
    output.push({
      type: "message",
      id: `msg_${id}`,
      status: "completed",
      role: "assistant",
      content: [{ type: "output_text", text: decision.content, annotations: [] }],
    });
  }
  for (const call of decision.calls) {
    output.push({
      type: "function_call",
      id: `fc_${call.id}`,
      call_id: call.id,
      name: call.name,
      arguments: call.arguments,
      status: "completed",
    });
  }
  return {
    id: `resp_${id}`,
    object: "response",
    created_at: 0,
    status: "completed",
    model,
    output,
    usage: {
      input_tokens: usage.input,
      input_tokens_details: { cached_tokens: usage.read },
      output_tokens: usage.output,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: usage.input + usage.output,
    },
  };
}

function chatCompletion(model: string, decision: WireDecision, usage: WireUsage, id: string) {
  const message: Block = { role: "assistant", content: decision.content };
  if (decision.calls.length > 0) {
    message.tool_calls = decision.calls.map((c) => ({
      id: c.id,
      type: "function",
      function: { name: c.name, arguments: c.arguments },
    }));
  }
  return {
    id: `chatcmpl-${id}`,
    object: "chat.completion",
    created: 0,
    model,
    choices: [{ index: 0, message, finish_reason: decision.calls.length > 0 ? "tool_calls" : "stop" }],
    usage: {
      prompt_tokens: usage.input,
      completion_tokens: usage.output,
      total_tokens: usage.input + usage.output,
      prompt_tokens_details: { cached_tokens: usage.read },
    },
  };
}

/** A whole reply body of `api`. */
export function wholeReply(
  api: Api,
  model: string,
  decision: WireDecision,
  usage: WireUsage,
  id = "fake",
): Record<string, unknown> {
  return api === "chat"
    ? chatCompletion(model, decision, usage, id)
    : api === "anthropic"
    ? anthropicMessage(model, decision, usage, id)
    : responsesBody(model, decision, usage, id);
}

/**
 * A Chat Completions body as the API streams it: the role, any `reasoning_content`, the text word by word, each
 * call's id and name then its arguments in two fragments by `index`, the finish reason, then usage in a
 * `choices: []` chunk.
 */
export function chatChunks(completion: Record<string, unknown>): Record<string, unknown>[] {
  const { id, model } = completion;
  const base = { id, object: "chat.completion.chunk", created: 0, model };
  const [choice] = completion.choices as { message: Block; finish_reason: string }[];
  const chunks: Record<string, unknown>[] = [];
  const push = (delta: Block, finish: string | null = null) =>
    chunks.push({ ...base, choices: [{ index: 0, delta, finish_reason: finish }], usage: null });
  push({ role: "assistant", content: "" });
  // Reasoning as the OpenAI-compatible servers that show it send it (DeepSeek, vLLM), before the answer.
  if (typeof choice.message.reasoning_content === "string") {
    push({ reasoning_content: choice.message.reasoning_content });
  }
  const content = choice.message.content as string | null;
  for (const word of content?.match(/\S+\s*/g) ?? []) push({ content: word });
  const calls = (choice.message.tool_calls ?? []) as { id: string; function: Block }[];
  calls.forEach((call, index) => {
    const args = String(call.function.arguments);
    const half = Math.ceil(args.length / 2);
    push({
      tool_calls: [{
        index,
        id: call.id,
        type: "function",
        function: { name: call.function.name, arguments: "" },
      }],
    });
    push({ tool_calls: [{ index, function: { arguments: args.slice(0, half) } }] });
    push({ tool_calls: [{ index, function: { arguments: args.slice(half) } }] });
  });
  push({}, choice.finish_reason);
  chunks.push({ ...base, choices: [], usage: completion.usage });
  return chunks;
}

/** A Messages body as the API streams it: start, each block's start, deltas and stop, stop reason, end. */
export function messagesEvents(message: Record<string, unknown>): [string, unknown][] {
  const usage = message.usage as Record<string, number>;
  const events: [string, unknown][] = [[
    "message_start",
    {
      type: "message_start",
      message: { ...message, content: [], stop_reason: null, usage: { ...usage, output_tokens: 1 } },
    },
  ]];
  events.push(["ping", { type: "ping" }]);
  for (const [index, block] of (message.content as Block[]).entries()) {
    const start = block.type === "text"
      ? { type: "text", text: "" }
      : block.type === "thinking"
      ? { type: "thinking", thinking: "", signature: "" }
      : block.type === "tool_use"
      ? { ...block, input: {} }
      : block;
    events.push(["content_block_start", { type: "content_block_start", index, content_block: start }]);
    const delta = (d: Block) =>
      events.push(["content_block_delta", { type: "content_block_delta", index, delta: d }]);
    if (block.type === "text") {
      for (const word of String(block.text).match(/\S+\s*/g) ?? []) delta({ type: "text_delta", text: word });
    } else if (block.type === "thinking") {
      delta({ type: "thinking_delta", thinking: block.thinking });
      delta({ type: "signature_delta", signature: block.signature });
    } else if (block.type === "tool_use") {
      const json = JSON.stringify(block.input);
      const half = Math.ceil(json.length / 2);
      delta({ type: "input_json_delta", partial_json: "" });
      delta({ type: "input_json_delta", partial_json: json.slice(0, half) });
      delta({ type: "input_json_delta", partial_json: json.slice(half) });
    }
    events.push(["content_block_stop", { type: "content_block_stop", index }]);
  }
  events.push(["message_delta", {
    type: "message_delta",
    delta: { stop_reason: message.stop_reason, stop_sequence: null },
    usage: { output_tokens: usage.output_tokens },
  }]);
  events.push(["message_stop", { type: "message_stop" }]);
  return events;
}

/** A Responses body as the API streams it: created, each item added with its deltas and done, completed. */
export function responsesEvents(response: Record<string, unknown>): [string, unknown][] {
  const events: [string, unknown][] = [];
  let sequence = 0;
  const push = (type: string, data: Record<string, unknown>) =>
    events.push([type, { type, sequence_number: sequence++, ...data }]);
  push("response.created", { response: { ...response, status: "in_progress", output: [], usage: null } });
  for (const [output_index, item] of (response.output as Block[]).entries()) {
    const item_id = item.id;
    if (item.type === "message") {
      push("response.output_item.added", {
        output_index,
        item: { ...item, status: "in_progress", content: [] },
      });
      const part = { type: "output_text", text: "", annotations: [] };
      push("response.content_part.added", { item_id, output_index, content_index: 0, part });
      const whole = String((item.content as Block[])[0].text);
      for (const delta of whole.match(/\S+\s*/g) ?? []) {
        push("response.output_text.delta", { item_id, output_index, content_index: 0, delta });
      }
      push("response.output_text.done", { item_id, output_index, content_index: 0, text: whole });
      push("response.content_part.done", {
        item_id,
        output_index,
        content_index: 0,
        part: { ...part, text: whole },
      });
    } else if (item.type === "function_call") {
      push("response.output_item.added", {
        output_index,
        item: { ...item, arguments: "", status: "in_progress" },
      });
      const args = String(item.arguments);
      const half = Math.ceil(args.length / 2);
      for (const delta of [args.slice(0, half), args.slice(half)]) {
        push("response.function_call_arguments.delta", { item_id, output_index, delta });
      }
      push("response.function_call_arguments.done", { item_id, output_index, arguments: args });
    } else {
      push("response.output_item.added", { output_index, item });
    }
    push("response.output_item.done", { output_index, item });
  }
  push("response.completed", { response });
  return events;
}

/**
 * A whole reply body of `api` streamed as SSE frames: Messages and Responses events each named as the API
 * names them, Chat Completions chunks unnamed and ended by `[DONE]`.
 */
export function streamedReply(api: Api, body: Record<string, unknown>): string[] {
  if (api === "chat") {
    return [...chatChunks(body).map((c) => `data: ${JSON.stringify(c)}\n\n`), "data: [DONE]\n\n"];
  }
  const events = api === "anthropic" ? messagesEvents(body) : responsesEvents(body);
  return events.map(([event, data]) => `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
}

/** Tokens of a value: its JSON's characters over 4, as the fakes count everything. */
export function tokensOf(value: unknown): number {
  return Math.ceil(JSON.stringify(value).length / 4);
}

/** FNV-1a, 32 bits, in hex: enough to tell prefixes apart in a fake. */
function hashOf(text: string): string {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return (hash >>> 0).toString(16);
}

/** The smallest prefix either provider caches, in tokens (Anthropic's Sonnet and Opus; OpenAI). */
export const MIN_CACHED_TOKENS = 1024;
/** Anthropic looks this many blocks back from a breakpoint for a prefix it wrote. */
const LOOKBACK_BLOCKS = 20;
/** OpenAI caches a prefix in steps of this many tokens past the minimum. */
const CACHE_STEP_TOKENS = 128;

/** A request's blocks in prefix order (tools, system, messages), each with whether it is a breakpoint. */
function prefixBlocks(api: Api, body: Record<string, unknown>): { block: unknown; mark: boolean }[] {
  const blocks: { block: unknown; mark: boolean }[] = [];
  const add = (block: unknown, mark = false) => blocks.push({ block, mark });
  for (const tool of (body.tools ?? []) as Block[]) {
    const { cache_control, ...rest } = tool;
    add(rest, cache_control !== undefined);
  }
  if (api === "anthropic") {
    for (const block of (body.system ?? []) as Block[]) {
      const { cache_control, ...rest } = block;
      add(rest, cache_control !== undefined);
    }
    for (const message of (body.messages ?? []) as { role: string; content: Block[] }[]) {
      for (const [j, block] of message.content.entries()) {
        const { cache_control, ...rest } = block;
        add(j === 0 ? { role: message.role, ...rest } : rest, cache_control !== undefined);
      }
    }
    return blocks;
  }
  for (const item of ((api === "chat" ? body.messages : body.input) ?? []) as unknown[]) add(item);
  return blocks;
}

/**
 * A provider's prompt cache. Messages (`anthropic`): a prefix is read only up to a breakpoint of an earlier
 * request (looking back 20 blocks from each of this request's), and written at each breakpoint of
 * {@linkcode MIN_CACHED_TOKENS} or more. Chat Completions and Responses: automatic, the longest prefix an earlier
 * request of the same cache key (Responses' `prompt_cache_key`) sent, in steps of 128 tokens past the minimum.
 */
export class PromptCache {
  #written = new Set<string>();
  #api: Api;

  constructor(api: Api) {
    this.#api = api;
  }

  /** The request's prompt tokens, and those read from and written to the cache; remembers what it wrote. */
  count(body: Record<string, unknown>): { input: number; read: number; written: number } {
    const blocks = prefixBlocks(this.#api, body);
    const key = this.#api === "responses" ? String(body.prompt_cache_key ?? "") : "";
    const hashes: string[] = [];
    const ends: number[] = [];
    let running = key;
    let sum = 0;
    for (const { block } of blocks) {
      const json = JSON.stringify(block);
      running = hashOf(running + json);
      sum += tokensOf(block);
      hashes.push(running);
      ends.push(sum);
    }
    if (this.#api !== "anthropic") {
      let readAt = -1;
      for (let i = hashes.length - 1; i >= 0; i--) {
        if (this.#written.has(hashes[i])) {
          readAt = i;
          break;
        }
      }
      for (const hash of hashes) this.#written.add(hash);
      const prefix = readAt < 0 ? 0 : ends[readAt];
      const read = prefix < MIN_CACHED_TOKENS ? 0 : MIN_CACHED_TOKENS +
        Math.floor((prefix - MIN_CACHED_TOKENS) / CACHE_STEP_TOKENS) * CACHE_STEP_TOKENS;
      return { input: sum, read, written: 0 };
    }
    const points = blocks.flatMap((b, i) => (b.mark ? [i] : []));
    let readAt = -1;
    for (const point of points) {
      for (let back = point; back >= Math.max(0, point - LOOKBACK_BLOCKS); back--) {
        if (this.#written.has(hashes[back])) {
          readAt = Math.max(readAt, back);
          break;
        }
      }
    }
    const read = readAt < 0 ? 0 : ends[readAt];
    let written = 0;
    for (const point of points) {
      if (point > readAt && ends[point] >= MIN_CACHED_TOKENS) {
        this.#written.add(hashes[point]);
        written = ends[point] - read;
      }
    }
    return { input: sum, read, written };
  }
}
