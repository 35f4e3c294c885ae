/**
 * A fake Anthropic Messages API behind an injected `fetch`, enforcing the rules the runtime must keep and
 * answering a broken request with a 400 in Anthropic's words (`{"type":"error","error":{...}}`): the key and
 * version headers, `max_tokens`, roles, non-empty text, every `tool_use` answered by a `tool_result` in the next
 * message (results first), at most 4 `cache_control` blocks, a thinking budget of 1024 or more under
 * `max_tokens`, no forced tool with thinking, thinking blocks back unchanged (their signature checked) and first
 * in an assistant message with calls, structured outputs (`output_config.format`) only for the models that
 * have them and only with closed objects and no refused constraint, image blocks only in user messages with a
 * base64 source of one of the four media types whose bytes are that type (see {@linkcode imageRule}). It
 * answers by rule like a tiny model (arithmetic: `calculator` calls, two at once for two expressions; a tool
 * result: an answer; with an output format, `{"answer": text}`; images in the last message: `I see 2
 * image(s) (image/png, image/jpeg): text`), with a signed thinking block when thinking is on,
 * streamed or whole in the API's recorded shapes, and counts cached tokens by Anthropic's rules: a prefix is
 * read only up to a breakpoint an earlier request wrote (looking back 20 blocks), written at each breakpoint
 * of 1024 tokens or more. Tests may script the next replies (refusal, max_tokens, overloaded).
 */
import { THOUGHT } from "./_thinking_providers.ts";
import {
  imageTypeOf,
  isBase64,
  messagesEvents,
  PromptCache,
  tokensOf as tokens,
} from "../scripts/_fake_wires.ts";

export const ANTHROPIC_KEY = "sk-ant-test-SENTINEL-456";

type Block = Record<string, unknown>;
type Wire = { role: string; content: string | Block[] };

/** A reply a test puts before the rules: a whole message body, or an HTTP error. */
export type Scripted =
  | { message: Partial<AnthropicMessage> }
  | { status: number; error: { type: string; message: string }; headers?: Record<string, string> }
  | { streamError: { type: string; message: string } };

export interface AnthropicMessage {
  id: string;
  type: "message";
  role: "assistant";
  model: string;
  content: Block[];
  stop_reason: string | null;
  stop_sequence: null;
  usage: Record<string, number>;
}

export interface AnthropicProvider {
  baseUrl: string;
  fetch: typeof globalThis.fetch;
  /** Every request body, parsed, in order (refused ones too). */
  requests: Record<string, unknown>[];
  /** Every request's headers. */
  headers: Headers[];
  /** The refusals it answered, in its words. */
  refused: string[];
  /** Replies sent before the rules, first in first out. */
  script: Scripted[];
}

const EXPRESSION = /\d+\s*[-+*/]\s*\d+/g;
let started = 0;

/** A refusal in Anthropic's shape. */
function refuse(status: number, type: string, message: string): Response {
  return Response.json({ type: "error", error: { type, message } }, { status });
}

/** The models with structured outputs (`output_config.format`): Opus, Sonnet and Haiku 4.5 and later. */
const STRUCTURED_OUTPUTS = /claude-(opus|sonnet|haiku)-(4-[5-9]|[5-9])(?!\d)/;

/** Constraints structured outputs refuse in a schema. */
const REFUSED_KEYWORDS = ["minimum", "maximum", "minLength", "maxLength", "maxItems", "multipleOf", "$ref"];

/** What Anthropic says of the first part of `schema` structured outputs do not take, or null. */
function schemaRule(schema: unknown, at: string): string | null {
  if (typeof schema !== "object" || schema === null) return null;
  const node = schema as Block;
  for (const keyword of REFUSED_KEYWORDS) {
    if (keyword in node) return `${at}: '${keyword}' is not supported`;
  }
  if (node.type === "object" && node.additionalProperties !== false) {
    return `${at}: For 'object' type, 'additionalProperties' must be explicitly set to false`;
  }
  for (const [name, inner] of Object.entries((node.properties ?? {}) as Block)) {
    const broken = schemaRule(inner, `${at}.properties.${name}`);
    if (broken !== null) return broken;
  }
  for (const key of ["items", "anyOf", "allOf"]) {
    const inner = node[key];
    for (const [i, part] of (Array.isArray(inner) ? inner : [inner]).entries()) {
      const broken = schemaRule(part, `${at}.${key}${Array.isArray(inner) ? `.${i}` : ""}`);
      if (broken !== null) return broken;
    }
  }
  return null;
}

/** The media types an image block may name, in the order Anthropic's error lists them. */
const MEDIA_TYPES = ["image/jpeg", "image/png", "image/gif", "image/webp"];

/**
 * What Anthropic would say of image block `j` of message `i` (worded by this fake after the API's validation
 * errors), or null when it would take it: a user message's, with a `base64` source (or a `url` one), one of
 * the four media types, base64 data, and bytes of the media type it names.
 */
function imageRule(block: Block, role: string, i: number, j: number): string | null {
  const at = `messages.${i}.content.${j}.image`;
  if (role !== "user") return `messages.${i}.content.${j}: image blocks are only allowed in user messages`;
  const source = (block.source ?? {}) as Block;
  if (source.type === "url") {
    return typeof source.url === "string" ? null : `${at}.source.url.url: Field required`;
  }
  if (source.type !== "base64") {
    return `${at}.source: Input tag '${source.type}' found using 'type' does not match any of the expected tags: 'base64', 'url'`;
  }
  if (!MEDIA_TYPES.includes(String(source.media_type))) {
    return `${at}.source.base64.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'`;
  }
  if (typeof source.data !== "string" || !isBase64(source.data)) {
    return `${at}.source.base64: invalid base64 data`;
  }
  const found = imageTypeOf(source.data);
  if (found === null) return `${at}.source.base64.data: Could not process image`;
  if (found !== source.media_type) {
    return `${at}.source.base64.data: The image was specified using the ${source.media_type} media type, but the image appears to be a ${found} image`;
  }
  return null;
}

export function anthropicProvider(baseUrl = "https://api.anthropic.example"): AnthropicProvider {
  const requests: Record<string, unknown>[] = [];
  const headers: Headers[] = [];
  const refused: string[] = [];
  const script: Scripted[] = [];
  /** The thinking blocks it signed, by signature. */
  const signed = new Map<string, string>();
  const cache = new PromptCache("anthropic");
  const name = `a${++started}`;
  let replies = 0;

  function rules(body: Record<string, unknown>): string | null {
    if (typeof body.max_tokens !== "number") return "max_tokens: Field required";
    const messages = body.messages as Wire[] | undefined;
    if (!Array.isArray(messages) || messages.length === 0) {
      return "messages: at least one message is required";
    }
    const thinking = body.thinking as { budget_tokens?: number } | undefined;
    if (thinking !== undefined) {
      if ((thinking.budget_tokens ?? 0) < 1024) {
        return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024";
      }
      if (thinking.budget_tokens! >= body.max_tokens) {
        return "`max_tokens` must be greater than `thinking.budget_tokens`.";
      }
      const choice = (body.tool_choice as { type?: string } | undefined)?.type;
      if (choice === "any" || choice === "tool") {
        return "Thinking may not be enabled when tool_choice forces tool use.";
      }
    }
    const format = (body.output_config as { format?: Block } | undefined)?.format;
    if (format !== undefined) {
      if (!STRUCTURED_OUTPUTS.test(String(body.model))) {
        return `output_config.format: structured outputs are not supported for model ${body.model}`;
      }
      const broken = schemaRule(format.schema, "output_config.format.schema");
      if (broken !== null) return broken;
    }
    for (const [k, tool] of ((body.tools ?? []) as Block[]).entries()) {
      if (!/^[a-zA-Z0-9_-]{1,64}$/.test(String(tool.name))) {
        return `tools.${k}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'`;
      }
      if (typeof tool.input_schema !== "object") return `tools.${k}.custom.input_schema: Field required`;
    }
    let marks = [...((body.tools ?? []) as Block[]), ...((body.system ?? []) as Block[])]
      .filter((b) => b.cache_control !== undefined).length;
    for (const [i, message] of messages.entries()) {
      if (message.role !== "user" && message.role !== "assistant") {
        return `messages.${i}.role: Input should be 'user' or 'assistant'`;
      }
      const blocks = typeof message.content === "string"
        ? [{ type: "text", text: message.content }]
        : message.content;
      marks += blocks.filter((b) => b.cache_control !== undefined).length;
      let seenOther = false;
      for (const [j, block] of blocks.entries()) {
        if (block.type === "text" && block.text === "") {
          return "messages: text content blocks must be non-empty";
        }
        if (block.type === "tool_result") {
          if (seenOther) {
            return `messages.${i}.content.${j}: tool_result blocks must come before any other content in a user message`;
          }
          const previous = messages[i - 1];
          const asked = Array.isArray(previous?.content) &&
            previous.content.some((b) => b.type === "tool_use" && b.id === block.tool_use_id);
          if (!asked) {
            return `messages.${i}.content.${j}: unexpected \`tool_use_id\` found in \`tool_result\` blocks: ` +
              `${block.tool_use_id}. Each \`tool_result\` block must have a corresponding \`tool_use\` block in the previous message.`;
          }
        } else seenOther = true;
        if (block.type === "image") {
          const broken = imageRule(block, message.role, i, j);
          if (broken !== null) return broken;
        }
        if (block.type === "tool_use" && !/^[a-zA-Z0-9_-]+$/.test(String(block.id))) {
          return `messages.${i}.content.${j}.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'`;
        }
        if (block.type === "thinking" && signed.get(String(block.signature)) !== block.thinking) {
          return `messages.${i}.content.${j}: Invalid \`signature\` in \`thinking\` block`;
        }
      }
      const calls = blocks.filter((b) => b.type === "tool_use");
      if (calls.length > 0) {
        const next = messages[i + 1];
        const answered = new Set(
          Array.isArray(next?.content)
            ? next.content.filter((b) => b.type === "tool_result").map((b) => b.tool_use_id)
            : [],
        );
        const missing = calls.filter((c) => !answered.has(c.id)).map((c) => c.id);
        if (missing.length > 0) {
          return `messages.${i}: \`tool_use\` ids were found without \`tool_result\` blocks immediately after: ` +
            `${
              missing.join(", ")
            }. Each \`tool_use\` block must have a corresponding \`tool_result\` block in the next message.`;
        }
        const last = messages.findLastIndex((m) => m.role === "assistant");
        if (
          thinking !== undefined && i === last && blocks[0].type !== "thinking" &&
          blocks[0].type !== "redacted_thinking"
        ) {
          return `messages.${i}.content.0.type: Expected \`thinking\` or \`redacted_thinking\`, but found \`${
            blocks[0].type
          }\`. ` +
            "When `thinking` is enabled, a final `assistant` message must start with a thinking block.";
        }
      }
    }
    if (marks > 4) return `A maximum of 4 blocks with cache_control may be provided. Found ${marks}.`;
    return null;
  }

  function decide(body: Record<string, unknown>): AnthropicMessage {
    const messages = body.messages as Wire[];
    const last = messages.at(-1)!;
    const blocks = typeof last.content === "string" ? [{ type: "text", text: last.content }] : last.content;
    const content: Block[] = [];
    if (body.thinking !== undefined) {
      const thought = `${THOUGHT} ${name}-${replies}`;
      const signature = `sig-${name}-${replies}`;
      signed.set(signature, thought);
      content.push({ type: "thinking", thinking: thought, signature });
    }
    const results = blocks.filter((b) => b.type === "tool_result");
    const format = (body.output_config as { format?: Block } | undefined)?.format;
    const answerTool = ((body.tools ?? []) as Block[]).find((t) => t.name === "structured_answer");
    let stop = "end_turn";
    if (results.length > 0) {
      const values = results.map((r) => {
        const match = /"result":(-?[\d.]+)/.exec(String(r.content));
        return match?.[1] ?? (r.is_error === true ? "an error" : "done");
      });
      content.push({ type: "text", text: `The answer is ${values.join(" and ")}.` });
    } else {
      const text = blocks.filter((b) => b.type === "text").map((b) => b.text).join(" ");
      const expressions = text.match(EXPRESSION) ?? [];
      if (expressions.length > 0) {
        for (const [k, expression] of expressions.slice(0, 2).entries()) {
          content.push({
            type: "tool_use",
            id: `toolu_${name}_${replies}_${k}`,
            name: "calculator",
            input: { expression },
          });
        }
        stop = "tool_use";
      } else if (blocks.some((b) => b.type === "image")) {
        const images = blocks.filter((b) => b.type === "image");
        const types = images.map((b) => imageTypeOf(String((b.source as Block).data))).join(", ");
        content.push({ type: "text", text: `I see ${images.length} image(s) (${types}): ${text}` });
      } else if (format !== undefined) {
        content.push({ type: "text", text: JSON.stringify({ answer: text }) });
      } else if (answerTool !== undefined) {
        content.push({
          type: "tool_use",
          id: `toolu_${name}_${replies}_a`,
          name: "structured_answer",
          input: { answer: text },
        });
        stop = "tool_use";
      } else {
        content.push({ type: "text", text: `echo: ${text}` });
      }
    }
    const { input: total, read, written } = cache.count(body);
    return {
      id: `msg_${name}_${replies++}`,
      type: "message",
      role: "assistant",
      model: String(body.model),
      content,
      stop_reason: stop,
      stop_sequence: null,
      usage: {
        input_tokens: total - read - written,
        cache_creation_input_tokens: written,
        cache_read_input_tokens: read,
        output_tokens: tokens(content),
      },
    };
  }

  function answer(input: string | URL | Request, init: RequestInit = {}): Response {
    const url = String(input);
    const sent = new Headers(init.headers);
    headers.push(sent);
    if (url !== `${baseUrl}/v1/messages`) return refuse(404, "not_found_error", `Not found: ${url}`);
    const body = JSON.parse(String(init.body));
    requests.push(body);
    if (sent.get("x-api-key") === null) {
      return refuse(401, "authentication_error", "x-api-key header is required");
    }
    if (sent.get("x-api-key") !== ANTHROPIC_KEY) {
      return refuse(401, "authentication_error", "invalid x-api-key");
    }
    if (sent.get("anthropic-version") === null) {
      return refuse(400, "invalid_request_error", "anthropic-version: header is required");
    }
    const broken = rules(body);
    if (broken !== null) {
      refused.push(broken);
      return refuse(400, "invalid_request_error", broken);
    }
    const step = script.shift();
    if (step !== undefined && "status" in step) {
      return Response.json({ type: "error", error: step.error }, {
        status: step.status,
        headers: step.headers,
      });
    }
    let message = decide(body);
    if (step !== undefined && "message" in step) message = { ...message, ...step.message };
    if (body.stream !== true) return Response.json(message);
    const events = step !== undefined && "streamError" in step
      ? [["message_start", {
        type: "message_start",
        message: { ...message, content: [], stop_reason: null },
      }], ["error", { type: "error", error: step.streamError }]] as [string, unknown][]
      : messagesEvents(message as unknown as Record<string, unknown>);
    const text = events.map(([event, data]) => `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`).join("");
    return new Response(text, { headers: { "content-type": "text/event-stream" } });
  }

  const fetch = (input: string | URL | Request, init?: RequestInit) => Promise.resolve(answer(input, init));
  return { baseUrl, fetch, requests, headers, refused, script };
}
