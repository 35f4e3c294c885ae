/**
 * A streamed completion: Server-Sent Events parsed from bytes cut anywhere ({@linkcode SseParser}), their
 * chunks assembled into the reply the whole body would give ({@linkcode ReplyAssembler}). Pure.
 * @module
 */
import type { LlmError } from "../errors.ts";
import type { ChatReply } from "../types.ts";
import { isRecord } from "../_json.ts";
import {
  contentText,
  invalidResponseError,
  parseCompletion,
  providerErrorMessage,
  quoteBody,
  replyFromMessage,
  reportedUsage,
  serializeRequestBody,
} from "./wire.ts";
import type { Dialect, SseEvent, StreamReader } from "./dialect.ts";

export type { SseEvent };
import type { ParseCompletionOptions } from "./wire.ts";

/** Options of {@linkcode SseParser}. */
export interface SseParserOptions {
  /** Dispatch an event left without its blank line at the end (`data: [DONE]`). @default {true} */
  dispatchAtEnd?: boolean;
}

const LINE_END = /\r\n|\r|\n/g;

/**
 * An incremental WHATWG event-stream parser for bytes cut anywhere (in a line, a character, a `\r\n`): `id`,
 * `retry` and unknown fields are ignored, a leading BOM is dropped. Never throws on input (bad UTF-8: U+FFFD).
 */
export class SseParser {
  #decoder = new TextDecoder("utf-8");
  #dispatchAtEnd: boolean;
  /** The text after the last line end: never contains `\r` or `\n`. */
  #partial = "";
  /** The last text ended with `\r`: a `\n` starting the next text belongs to that line end. */
  #skipLineFeed = false;
  #eventType = "";
  #data: string[] = [];
  #ended = false;

  constructor(options: SseParserOptions = {}) {
    const { dispatchAtEnd = true } = options;
    this.#dispatchAtEnd = dispatchAtEnd;
  }

  /** Feeds the next bytes; returns the events they completed, in order. */
  push(bytes: Uint8Array): SseEvent[] {
    if (this.#ended) throw new TypeError("Cannot push to SseParser: the stream has already ended");
    return this.#feed(this.#decoder.decode(bytes, { stream: true }));
  }

  /** Ends the stream; returns the events still pending (see `dispatchAtEnd`). Later calls return none. */
  end(): SseEvent[] {
    if (this.#ended) return [];
    const events = this.#feed(this.#decoder.decode());
    this.#ended = true;
    if (!this.#dispatchAtEnd) return events;
    if (this.#partial !== "") this.#line(this.#partial, events);
    this.#partial = "";
    this.#dispatch(events);
    return events;
  }

  #feed(text: string): SseEvent[] {
    const events: SseEvent[] = [];
    if (text === "") return events;
    let from = 0;
    if (this.#skipLineFeed) {
      this.#skipLineFeed = false;
      if (text.startsWith("\n")) from = 1;
    }
    const buffer = this.#partial + text.slice(from);
    // `#partial` holds no line end, so the search can start where the new text does.
    LINE_END.lastIndex = this.#partial.length;
    let start = 0;
    for (let match = LINE_END.exec(buffer); match !== null; match = LINE_END.exec(buffer)) {
      this.#line(buffer.slice(start, match.index), events);
      start = match.index + match[0].length;
      if (match[0] === "\r" && start === buffer.length) this.#skipLineFeed = true;
    }
    this.#partial = buffer.slice(start);
    return events;
  }

  #line(line: string, events: SseEvent[]): void {
    if (line === "") return this.#dispatch(events);
    if (line.startsWith(":")) return;
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") this.#data.push(value);
    else if (field === "event") this.#eventType = value;
    // `id` and `retry` only matter to a reconnecting EventSource; a chat completion is never resumed.
  }

  #dispatch(events: SseEvent[]): void {
    if (this.#data.length > 0) {
      events.push({ event: this.#eventType === "" ? null : this.#eventType, data: this.#data.join("\n") });
    }
    this.#data = [];
    this.#eventType = "";
  }
}

/** One tool call as its fragments arrive: the first carries id, type and name, the rest more arguments. */
interface PendingCall {
  /** Where the call sorts: its `index`, or (a server that omits it) one past the last call's. */
  order: number;
  id: string | undefined;
  type: string | undefined;
  name: string | undefined;
  arguments: string;
  /** The first `arguments` fragment that was neither a string nor an object: the call cannot run. */
  badArguments?: unknown;
  /** The `extra_content` of the call's first fragment that had one (Gemini's thought signature). */
  extraContent?: Record<string, unknown>;
}

/** Whether a delta carries reasoning in one of the fields the dialects use. */
function carriesReasoning(delta: Record<string, unknown>): boolean {
  const text = (value: unknown) => typeof value === "string" && value !== "";
  const details = delta.reasoning_details;
  return text(delta.reasoning_content) || text(delta.reasoning) ||
    (Array.isArray(details) && details.length > 0);
}

/** Fields of a `reasoning_details` entry whose pieces are joined across deltas; the others keep the first. */
const JOINED_DETAIL_FIELDS = new Set(["text", "summary", "data"]);

/**
 * Builds a reply from stream events: `add` each, then `reply()` once `complete`. Of choice 0 it keeps the text
 * of `delta.content` (a string or text parts, see {@linkcode contentText}), `delta.tool_calls` and
 * `finish_reason`; of the chunks, the last usage wherever it is (see {@linkcode reportedUsage}) and the first
 * `model`. With `options.origin` it also keeps the provider state, as the whole body would carry it:
 * `reasoning_content` pieces joined, `reasoning_details` entries merged by their `index` (their `text`,
 * `summary` and `data` pieces joined), the message's `extra_content` and each call's (from the first
 * fragment that has one). Drops the rest (other reasoning, events not named `message` or `error`).
 *
 * Tool-call fragments are merged by `index`. A fragment without one continues the call with its id; else, once
 * a delta has listed two or more fragments without `index`, the call of its position in its delta (entry k
 * of every later delta, with or without `index`, continues call k of that listing); else, without an id,
 * the last call. A fragment without `index` that starts a call makes its position that call's index. So a
 * server that sends one call at a time, starting each with an id, and one that lists several calls in a
 * delta both work. Either way a fragment with an id other than its call's starts a new call, as does a
 * second entry for the same call in one delta: arguments are never joined across calls.
 */
export class ReplyAssembler implements StreamReader {
  #options: ParseCompletionOptions;
  #content: string | null = null;
  #calls: PendingCall[] = [];
  /** The call each `index` now stands for. */
  #byIndex = new Map<number, PendingCall>();
  /** The calls the current chunk's delta has already added to. */
  #touched = new Set<PendingCall>();
  /** A delta has listed several fragments without `index`: such fragments stand for their position. */
  #positional = false;
  #usage: unknown = undefined;
  #model: string | undefined;
  #reasoningContent = "";
  /** `reasoning_details` entries by their `index` (else their position in the delta), in arrival order. */
  #details = new Map<number, Record<string, unknown>>();
  #extraContent: Record<string, unknown> | undefined;
  #id: string | null = null;
  #sawChoice = false;
  #finishReason: string | null = null;
  #done = false;
  #reasoningChunks = 0;

  constructor(options: ParseCompletionOptions = {}) {
    this.#options = options;
  }

  /** The `finish_reason` of the choice, once a chunk has carried one. */
  get finishReason(): string | null {
    return this.#finishReason;
  }

  /** The completion's `id` as the first chunk that carried one gave it, or null. */
  get responseId(): string | null {
    return this.#id;
  }

  /**
   * How many chunks have carried reasoning (`reasoning_content`, `reasoning` or `reasoning_details`), kept
   * or not: progress a view may show while the model thinks, never its text.
   */
  get reasoningChunks(): number {
    return this.#reasoningChunks;
  }

  /** What a stream that ends before it is complete lacked. */
  readonly missing = "without [DONE] or a finish_reason";

  /** `[DONE]` has arrived: later events are not read. */
  get done(): boolean {
    return this.#done;
  }

  /** The answer is whole: `[DONE]` arrived, or at least a `finish_reason` (some streams end without it). */
  get complete(): boolean {
    return this.#done || this.#finishReason !== null;
  }

  /** Reads one event, returning the answer text it added; throws `LlmError` for data that is not a chunk. */
  add(event: SseEvent): string {
    if (this.#done) return "";
    if (event.event !== null && event.event !== "message" && event.event !== "error") return "";
    const data = event.data.trim();
    if (data === "[DONE]") {
      this.#done = true;
      return "";
    }
    if (data === "") return "";
    let chunk: unknown;
    try {
      chunk = JSON.parse(data);
    } catch {
      if (event.event === "error") throw this.#providerError(data);
      throw this.#invalid(`stream data is not JSON: ${quoteBody(data)}`);
    }
    const detail = providerErrorMessage(chunk);
    if (detail !== null) throw this.#providerError(detail);
    if (event.event === "error") throw this.#providerError(data);
    return this.#chunk(chunk);
  }

  /** The reply so far, as the whole body would give it; throws `LlmError` if no chunk had a choice. */
  reply(): ChatReply {
    if (!this.#sawChoice) throw this.#invalid('the stream carried no "choices"');
    const calls = this.#calls.toSorted((a, b) => a.order - b.order).map((call) => ({
      id: call.id,
      type: call.type ?? "function",
      function: { name: call.name, arguments: "badArguments" in call ? call.badArguments : call.arguments },
      extra_content: call.extraContent,
    }));
    const message: Record<string, unknown> = {
      content: this.#content,
      reasoning_content: this.#reasoningContent,
      reasoning_details: [...this.#details.values()],
      extra_content: this.#extraContent,
    };
    if (calls.length > 0) message.tool_calls = calls;
    const model = this.#model ?? this.#options.model ?? "";
    return replyFromMessage(message, {
      ...this.#options,
      usage: this.#usage,
      model,
      where: "choices[0].delta",
    });
  }

  #chunk(chunk: unknown): string {
    if (!isRecord(chunk)) throw this.#invalid("stream chunk is not a JSON object");
    if (this.#model === undefined && typeof chunk.model === "string" && chunk.model !== "") {
      this.#model = chunk.model;
    }
    if (this.#id === null && typeof chunk.id === "string" && chunk.id !== "") this.#id = chunk.id;
    const choices = chunk.choices ?? [];
    if (!Array.isArray(choices)) throw this.#invalid('stream chunk "choices" is not an array');
    const choice = choices.find((item) => isRecord(item) && (item.index ?? 0) === 0);
    this.#usage = reportedUsage(chunk, choice) ?? this.#usage;
    if (!isRecord(choice)) return "";
    this.#sawChoice = true;
    if (typeof choice.finish_reason === "string" && choice.finish_reason !== "") {
      this.#finishReason = choice.finish_reason;
    }
    const delta = choice.delta ?? {};
    if (!isRecord(delta)) throw this.#invalid("choices[0].delta is not an object");
    const rawCalls = delta.tool_calls ?? [];
    if (!Array.isArray(rawCalls)) throw this.#invalid("choices[0].delta.tool_calls is not an array");
    this.#touched.clear();
    for (const fragment of rawCalls) this.#fragment(fragment);
    if (carriesReasoning(delta)) this.#reasoningChunks++;
    if ((this.#options.origin ?? null) !== null) this.#state(delta);

    const where = "choices[0].delta.content";
    const piece = contentText(delta.content, { where, source: this.#options.source });
    if (piece === null) return "";
    this.#content = (this.#content ?? "") + piece;
    return piece;
  }

  #fragment(fragment: unknown): void {
    if (!isRecord(fragment)) throw this.#invalid("choices[0].delta.tool_calls[] item is not an object");
    const fn = isRecord(fragment.function) ? fragment.function : {};
    const id = typeof fragment.id === "string" && fragment.id !== "" ? fragment.id : undefined;
    const index = fragment.index;
    if (index !== undefined && !(typeof index === "number" && Number.isInteger(index) && index >= 0)) {
      throw this.#invalid(`choices[0].delta.tool_calls[] index is not a whole number: ${String(index)}`);
    }
    // Each fragment of a delta adds to exactly one call, so the calls the delta touched count those before it.
    const position = this.#touched.size;
    if (index === undefined && position > 0) this.#positional = true;
    let call = this.#continued(index, id, position);
    const otherId = id !== undefined && call?.id !== undefined && call.id !== id;
    if (call === undefined || otherId || this.#touched.has(call)) {
      const order = index ?? Math.max(-1, ...this.#calls.map((known) => known.order)) + 1;
      call = { order, id: undefined, type: undefined, name: undefined, arguments: "" };
      this.#calls.push(call);
      this.#byIndex.set(index ?? position, call);
    }
    this.#touched.add(call);
    call.id ??= id;
    if (isRecord(fragment.extra_content)) call.extraContent ??= fragment.extra_content;
    if (typeof fragment.type === "string") call.type ??= fragment.type;
    if (typeof fn.name === "string" && fn.name !== "") call.name ??= fn.name;
    const args = fn.arguments;
    if (typeof args === "string") call.arguments += args;
    else if (isRecord(args)) call.arguments += JSON.stringify(args);
    else if (args !== undefined && args !== null && !("badArguments" in call)) call.badArguments = args;
  }

  /** Collects the delta's pieces of provider state (see the class documentation). */
  #state(delta: Record<string, unknown>): void {
    if (typeof delta.reasoning_content === "string") this.#reasoningContent += delta.reasoning_content;
    if (isRecord(delta.extra_content)) this.#extraContent = { ...this.#extraContent, ...delta.extra_content };
    if (!Array.isArray(delta.reasoning_details)) return;
    for (const [position, entry] of delta.reasoning_details.entries()) {
      if (!isRecord(entry)) continue;
      const key = typeof entry.index === "number" && Number.isInteger(entry.index) ? entry.index : position;
      const known = this.#details.get(key);
      if (known === undefined) {
        this.#details.set(key, { ...entry });
        continue;
      }
      for (const [field, value] of Object.entries(entry)) {
        const joined = JOINED_DETAIL_FIELDS.has(field) && typeof value === "string" &&
          typeof known[field] === "string";
        if (joined) known[field] += value;
        else if (known[field] === undefined || known[field] === null) known[field] = value;
      }
    }
  }

  /** The call a fragment continues, if any: by `index`; else by id, by position, or (no id) the last call. */
  #continued(index: number | undefined, id: string | undefined, position: number): PendingCall | undefined {
    if (index !== undefined) return this.#byIndex.get(index);
    const known = id === undefined ? undefined : this.#calls.find((call) => call.id === id);
    if (known !== undefined) return known;
    if (this.#positional) return this.#byIndex.get(position);
    return id === undefined ? this.#calls.at(-1) : undefined;
  }

  #invalid(reason: string): LlmError {
    return invalidResponseError(reason, this.#options.source);
  }

  #providerError(detail: string): LlmError {
    return this.#invalid(`the provider sent an error mid-stream: ${quoteBody(detail)}`);
  }
}

/** Chat Completions (`LLM_API=chat`): `POST {baseUrl}/chat/completions` with a bearer key. */
export const CHAT_COMPLETIONS: Dialect = {
  path: "/chat/completions",
  modelsPath: "/models",
  headers: {},
  auth: (apiKey) => ({ Authorization: `Bearer ${apiKey}` }),
  body: (messages, tools, options) => serializeRequestBody(options.model, messages, tools, options),
  read: (body, options) => ({
    reply: parseCompletion(body, options),
    id: isRecord(body) ? body.id : undefined,
  }),
  stream: (options) => new ReplyAssembler(options),
};
