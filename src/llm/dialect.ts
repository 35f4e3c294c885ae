/**
 * What differs between the wire formats the model client speaks (`LLM_API`): Chat Completions, Anthropic
 * Messages, OpenAI Responses. A dialect says where a request goes, how it authenticates, what its body is and
 * how a whole or streamed reply reads; the client does the same I/O, deadlines and retries for each.
 * @module
 */
import type {
  ChatReply,
  Message,
  ReasoningEffort,
  ResponseFormat,
  ToolChoice,
  ToolSchema,
} from "../types.ts";

export { LLM_APIS, type LlmApi } from "../types.ts";

/** One dispatched event. */
export interface SseEvent {
  /** The last `event:` field of the event; `null` when it had none (the spec's default type "message"). */
  event: string | null;
  /** Its `data:` fields joined with `\n`. */
  data: string;
}

/** What a request's body is built from besides its messages and tools; the same for every attempt. */
export interface BodyOptions {
  model: string;
  stream: boolean;
  /** What the answer must be; null: plain text. */
  responseFormat: ResponseFormat | null;
  /** Where the request goes (see `modelOrigin`): provider state from there goes back, any other is left out. */
  origin: string;
  /** How hard a reasoning model thinks; null: the provider's own. */
  reasoningEffort: ReasoningEffort | null;
  /** Tokens a model may think for before it answers (Anthropic's extended thinking); null: off. */
  thinkingBudget: number | null;
  /** Most tokens of one reply; null: the provider's own (Messages requires one: the dialect's default). */
  maxOutputTokens: number | null;
  /** The same for every request of a session, so they share the provider's prompt cache; null: none. */
  cacheKey: string | null;
  /** Whether the model may call the tools offered (`none`: sent only with tools). */
  toolChoice: ToolChoice;
}

/** How a reply names where it came from, for its errors and its provider state. */
export interface ReadOptions {
  /** The model the reply names when the body has none (the one asked for). */
  model: string;
  /** Where the body came from (the provider's host), named in error messages. */
  source: string;
  /** Who produced the body (see `modelOrigin`): the reply keeps its provider state, tagged with it. */
  origin: string | null;
}

/** A whole reply as read: the reply (with its `finishReason`) and the provider's id of it, for telemetry. */
export interface ReadReply {
  reply: ChatReply;
  id: unknown;
}

/** A streamed reply as its events arrive: `add` each, then `reply()` once the stream is over. */
export interface StreamReader {
  /**
   * Reads one event, returning the answer text it added. Throws `LlmError`: `invalid_response` for data that
   * is not the dialect's, `http` (with the status the provider's error event names, e.g. 529 overloaded) for an
   * error event that a retry may cure before any answer text was shown.
   */
  add(event: SseEvent): string;
  /** The provider said the stream is over: later events are not read. */
  readonly done: boolean;
  /** The answer is whole (the stream said how it ended). */
  readonly complete: boolean;
  /** What an incomplete stream lacked, for its error: `without [DONE] or a finish_reason`. */
  readonly missing: string;
  /** Events that carried reasoning, kept or not: progress a view may show, never its text. */
  readonly reasoningChunks: number;
  /** How the reply ended, in Chat Completions' words (`stop`, `tool_calls`, `length`, …), once known. */
  readonly finishReason: string | null;
  /** The provider's id of the reply, once an event carried it. */
  readonly responseId: string | null;
  /** The reply so far, as the whole body would give it; throws `LlmError` when there is none. */
  reply(): ChatReply;
}

/** One wire format. Its functions are pure; they throw `TypeError` for a malformed message. */
export interface Dialect {
  /** Appended to the base URL: `/chat/completions`, `/v1/messages`, `/responses`. */
  readonly path: string;
  /** Appended to the base URL to list the models (the start-up probe): `/models`, `/v1/models`. */
  readonly modelsPath: string;
  /** The headers that carry a (non-empty) key. */
  auth(apiKey: string): Record<string, string>;
  /** Headers every request carries besides its key and content type (an API version). */
  readonly headers: Readonly<Record<string, string>>;
  /** The request body: the same bytes for the same arguments. */
  body(messages: readonly Message[], tools: readonly ToolSchema[], options: BodyOptions): string;
  /** A whole reply body, parsed; throws `LlmError` of kind `invalid_response` when it is not a reply. */
  read(body: unknown, options: ReadOptions): ReadReply;
  /** A reader of a streamed reply. */
  stream(options: ReadOptions): StreamReader;
}
