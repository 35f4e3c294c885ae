/**
 * Streaming reply assembly: the `data` payloads of a Chat Completions event stream, one at a time, become the
 * same {@linkcode ChatReply} the non-streaming body of that answer would give. Pure: the caller reads the
 * stream and hands each answer-text piece to whoever shows it.
 * @module
 */
import type { LlmError } from "../errors.ts";
import type { ChatReply } from "../types.ts";
import { invalidResponseError, providerErrorMessage, quoteBody, replyFromMessage } from "./_wire.ts";
import type { SseEvent } from "./_sse.ts";

/** Options of {@linkcode ReplyAssembler}. */
export interface ReplyAssemblerOptions {
  /**
   * The model the reply names when no chunk names one (the one the request asked for).
   * @default {""}
   */
  model?: string;
  /**
   * Where the stream came from (the provider's host), named in error messages.
   * @default {undefined}
   */
  source?: string;
}

/** One tool call as its fragments arrive: the first carries id, type and name, the rest more arguments. */
interface PendingCall {
  id: string | undefined;
  type: string | undefined;
  name: string | undefined;
  arguments: string;
  /** The first `arguments` fragment that was neither a string nor an object: the call cannot run. */
  badArguments?: unknown;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** The stream's marker of its end, in place of a JSON chunk. */
const DONE = "[DONE]";

/**
 * Builds a reply from stream events, in order: {@linkcode ReplyAssembler.add} each event, then
 * {@linkcode ReplyAssembler.reply} once the stream is {@linkcode ReplyAssembler.complete}.
 *
 * Of `choices[0]` (the choice with `index` 0) it keeps `delta.content` (appended), `delta.tool_calls`
 * (merged by `index`: id, type and name from the first fragment that has them, `arguments` appended) and
 * `finish_reason`; of each chunk, a non-null `usage` (the last one wins: OpenAI's final `choices: []` chunk
 * or DeepSeek's `finish_reason` chunk) and the first `model`. Drops everything else: `reasoning_content`,
 * `refusal`, `obfuscation`, `service_tier`, `system_fingerprint`. Events named other than `message` or
 * `error` (keep-alive pings) are skipped.
 */
export class ReplyAssembler {
  #fallbackModel: string;
  #source: string | undefined;
  #content: string | null = null;
  #calls = new Map<number, PendingCall>();
  #usage: unknown = undefined;
  #model: string | undefined;
  #sawChoice = false;
  #finishReason: string | null = null;
  #done = false;

  constructor(options: ReplyAssemblerOptions = {}) {
    const { model = "", source } = options;
    this.#fallbackModel = model;
    this.#source = source;
  }

  /** The `finish_reason` of the choice, once a chunk has carried one. */
  get finishReason(): string | null {
    return this.#finishReason;
  }

  /** `[DONE]` has arrived: later events are not read. */
  get done(): boolean {
    return this.#done;
  }

  /** The answer is whole: `[DONE]` arrived, or at least a `finish_reason` (a stream may end without `[DONE]`). */
  get complete(): boolean {
    return this.#done || this.#finishReason !== null;
  }

  /**
   * Reads one event; returns the answer text it added (`""` for none — reasoning never counts). Throws
   * `LlmError` of kind `invalid_response` for data that is not JSON, a chunk of the wrong shape, or an error
   * the provider sent instead of a chunk (its message quoted).
   */
  add(event: SseEvent): string {
    if (this.#done) return "";
    if (event.event !== null && event.event !== "message" && event.event !== "error") return "";
    const data = event.data.trim();
    if (data === DONE) {
      this.#done = true;
      return "";
    }
    if (data === "") return "";
    let chunk: unknown;
    try {
      chunk = JSON.parse(data);
    } catch {
      if (event.event === "error") throw this.#providerError(quoteBody(data));
      throw this.#invalid(`stream data is not JSON: ${quoteBody(data)}`);
    }
    const detail = providerErrorMessage(chunk);
    if (detail !== null) throw this.#providerError(quoteBody(detail));
    if (event.event === "error") throw this.#providerError(quoteBody(data));
    return this.#chunk(chunk);
  }

  /**
   * The reply so far, normalised as the non-streaming body would be (`""` beside tool calls becomes `null`,
   * missing arguments `"{}"`, a call without name or with arguments of the wrong type comes back with its
   * `problem`). Throws `LlmError` of kind `invalid_response` when no chunk carried a choice.
   */
  reply(): ChatReply {
    if (!this.#sawChoice) throw this.#invalid('the stream carried no "choices"');
    const calls = [...this.#calls.entries()].sort(([a], [b]) => a - b).map(([, call]) => ({
      id: call.id,
      type: call.type ?? "function",
      function: { name: call.name, arguments: "badArguments" in call ? call.badArguments : call.arguments },
    }));
    const message: Record<string, unknown> = { content: this.#content };
    if (calls.length > 0) message.tool_calls = calls;
    return replyFromMessage(message, {
      usage: this.#usage,
      model: this.#model ?? this.#fallbackModel,
      source: this.#source,
      where: "choices[0].delta",
    });
  }

  #chunk(chunk: unknown): string {
    if (!isRecord(chunk)) throw this.#invalid("stream chunk is not a JSON object");
    if (this.#model === undefined && typeof chunk.model === "string" && chunk.model !== "") {
      this.#model = chunk.model;
    }
    if (isRecord(chunk.usage)) this.#usage = chunk.usage;
    const choices = chunk.choices ?? [];
    if (!Array.isArray(choices)) throw this.#invalid('stream chunk "choices" is not an array');
    const choice = choices.find((item) => isRecord(item) && (item.index ?? 0) === 0);
    if (!isRecord(choice)) return "";
    this.#sawChoice = true;
    if (typeof choice.finish_reason === "string" && choice.finish_reason !== "") {
      this.#finishReason = choice.finish_reason;
    }
    const delta = choice.delta ?? {};
    if (!isRecord(delta)) throw this.#invalid("choices[0].delta is not an object");
    const rawCalls = delta.tool_calls ?? [];
    if (!Array.isArray(rawCalls)) throw this.#invalid("choices[0].delta.tool_calls is not an array");
    for (const fragment of rawCalls) this.#fragment(fragment);

    const piece = delta.content ?? null;
    if (piece === null) return "";
    if (typeof piece !== "string") {
      throw this.#invalid("choices[0].delta.content is neither a string nor null");
    }
    this.#content = (this.#content ?? "") + piece;
    return piece;
  }

  #fragment(fragment: unknown): void {
    if (!isRecord(fragment)) throw this.#invalid("choices[0].delta.tool_calls[] item is not an object");
    const fn = isRecord(fragment.function) ? fragment.function : {};
    const id = typeof fragment.id === "string" && fragment.id !== "" ? fragment.id : undefined;
    let index: number;
    if (typeof fragment.index === "number" && Number.isInteger(fragment.index) && fragment.index >= 0) {
      index = fragment.index;
    } else if (fragment.index === undefined) {
      // Servers that omit `index` start a call with its id and continue it without one.
      const known = [...this.#calls.entries()].find(([, call]) => call.id === id);
      const last = Math.max(-1, ...this.#calls.keys());
      index = id === undefined ? Math.max(0, last) : known?.[0] ?? last + 1;
    } else {
      throw this.#invalid(
        `choices[0].delta.tool_calls[] index is not a whole number: ${String(fragment.index)}`,
      );
    }
    let call = this.#calls.get(index);
    if (call === undefined) {
      call = { id: undefined, type: undefined, name: undefined, arguments: "" };
      this.#calls.set(index, call);
    }
    call.id ??= id;
    if (typeof fragment.type === "string") call.type ??= fragment.type;
    if (typeof fn.name === "string" && fn.name !== "") call.name ??= fn.name;
    const args = fn.arguments;
    if (typeof args === "string") call.arguments += args;
    else if (isRecord(args)) call.arguments += JSON.stringify(args);
    else if (args !== undefined && args !== null && !("badArguments" in call)) call.badArguments = args;
  }

  #invalid(reason: string): LlmError {
    return invalidResponseError(reason, this.#source);
  }

  #providerError(detail: string): LlmError {
    return this.#invalid(`the provider sent an error mid-stream: ${detail}`);
  }
}
