/**
 * The data that flows through the runtime: messages, tool calls and results, run events and turn results.
 * Every other module speaks in these types; none of them carries behaviour.
 * @module
 */
import type { LlmErrorKind } from "./errors.ts";

/** One function call the model asked for, exactly as it arrived (arguments are a JSON string). */
export interface ToolCall {
  id: string;
  name: string;
  arguments: string;
  /**
   * Why the call cannot run, when the provider sent it malformed (no function name, arguments neither a
   * JSON text nor an object). Set by the model client; the turn answers the call with this error and never
   * stores it.
   */
  problem?: string;
}

/**
 * A conversation message as the runtime keeps it.
 *
 * `runtime` marks a message the runtime itself wrote into the conversation (the "[runtime]" nudge after an
 * empty reply). It goes to the model as a user message but never counts as a user turn.
 */
export type Role = "system" | "user" | "assistant" | "tool" | "runtime";

/** The image formats every wire format takes (Chat Completions, Messages and Responses alike). */
export const IMAGE_MEDIA_TYPES = ["image/png", "image/jpeg", "image/gif", "image/webp"] as const;

/**
 * An image a user message carries beside its text, inline: each wire format sends it as the provider's own
 * image part (a `data:` URL, or a base64 source block).
 */
export interface ImagePart {
  /** One of {@linkcode IMAGE_MEDIA_TYPES}: what the bytes are. */
  mediaType: typeof IMAGE_MEDIA_TYPES[number];
  /** The image's bytes in base64, without a `data:` prefix. */
  data: string;
  /** The file name it came from, for people; never sent to the model. */
  name?: string;
}

/** A message in the provider-neutral shape the context builder produces and LLM clients consume. */
export interface Message {
  role: Role;
  /** The message's text; with `images`, the text that goes with them. */
  content: string | null;
  /**
   * User only: images that go with the text, in order. Every other role ignores them; whatever reads
   * `content` as the message's text is unchanged by them.
   */
  images?: readonly ImagePart[];
  /** Assistant only: the calls the model made. */
  toolCalls?: ToolCall[];
  /** Tool only: which call this result answers. */
  toolCallId?: string;
  /** Assistant only: what its provider needs back on later requests (see {@linkcode ProviderState}). */
  providerState?: ProviderState;
}

/**
 * What a provider sent beside an assistant message that it needs back on later requests, kept opaque and
 * exactly as received: the message's own fields (`reasoning_content`, `reasoning_details`, `extra_content`)
 * and each tool call's (`extra_content`, by the call's position). It goes back only to `origin`, the base URL
 * and model family that produced it, and nowhere else: never traced, shown or summarised.
 */
export interface ProviderState {
  /** Who produced it: the endpoint and model family (see `modelOrigin` in `llm/wire.ts`). */
  origin: string;
  /** Fields of the assistant message, by wire name. */
  message?: Readonly<Record<string, unknown>>;
  /** Fields of each tool call by its position in `toolCalls` (null: none for that call). */
  calls?: readonly (Readonly<Record<string, unknown>> | null)[];
}

/** A message as stored in a session: its stable id makes saving idempotent. */
export interface StoredMessage extends Message {
  id: string;
  createdAt: string;
}

/** A tool as the model sees it: the `function` part of a Chat Completions tool. */
export interface ToolSchema {
  name: string;
  description: string;
  parameters: Record<string, unknown>;
}

/** A tool call's outcome, serialized as the tool message the model reads (a type alias: it is event data). */
export type ToolResult = {
  ok: boolean;
  data: unknown;
  error: string | null;
  truncated: boolean;
};

/** Token counts as the provider reported them; the runtime never invents them. */
export interface Usage {
  promptTokens: number | null;
  completionTokens: number | null;
  totalTokens: number | null;
  /** Input tokens the provider read from its prompt cache, a part of `promptTokens`; null when not reported. */
  cachedTokens: number | null;
  /**
   * Input tokens the provider wrote to its prompt cache (Anthropic's `cache_creation_input_tokens`), a part of
   * `promptTokens`; null or absent when not reported.
   */
  cacheWriteTokens?: number | null;
}

/**
 * Tokens of model calls as the store counts them, for one model on one UTC day: as reported, else estimated
 * (`estimatedCalls` says how many calls were), summed over `calls`.
 */
export interface UsageEntry {
  /** The UTC day of the calls, `YYYY-MM-DD`. */
  day: string;
  /** The model that answered, as its reply named it. */
  model: string;
  promptTokens: number;
  /** Of `promptTokens`, those the provider read from its prompt cache (0 when not reported or estimated). */
  cachedTokens: number;
  /**
   * Of `promptTokens`, those the provider wrote to its prompt cache (0 when not reported or estimated); with
   * `cachedTokens` never more than `promptTokens`.
   */
  cacheWriteTokens: number;
  completionTokens: number;
  calls: number;
  estimatedCalls: number;
}

/** What one model call returned. */
export interface ChatReply {
  content: string | null;
  toolCalls: ToolCall[];
  usage: Usage | null;
  model: string;
  /** Transient failures retried before this reply came (0 or absent: the first attempt answered). */
  retries?: number;
  /** What the provider needs back with this message on later requests, if it sent any. */
  providerState?: ProviderState;
  /**
   * Why the reply ended, as the provider said (`stop`, `tool_calls`, `length`, …); `null` when it said
   * nothing (a stream that ended without a finish reason). Absent from clients that do not know.
   */
  finishReason?: string | null;
}

/**
 * What the final answer of a turn must be (a client's `response_format`): a JSON object (`json_object`), or a
 * JSON value valid against `schema` (`json_schema`, with the `name` the provider is sent).
 */
export type ResponseFormat =
  | { type: "json_object" }
  | {
    type: "json_schema";
    /** Sent to the provider; 1-64 characters of a-z A-Z 0-9 _ -. */
    name: string;
    schema: Record<string, unknown>;
    /** The provider's strict mode, passed on only when the client set it. */
    strict?: boolean;
    description?: string;
  };

/** The encodings AGENT_TOKENIZER accepts: GPT-4o and later (o200k_base), GPT-4 and GPT-3.5 (cl100k_base). */
export const TOKENIZERS = ["o200k_base", "cl100k_base"] as const;

/** One of {@linkcode TOKENIZERS}. */
export type TokenizerName = typeof TOKENIZERS[number];

/** Who serves a model and which one is asked for, as telemetry names them. */
export interface ModelInfo {
  /** `gen_ai.provider.name`: `openai`, `deepseek`, … */
  provider: string;
  /** `gen_ai.request.model`: the model name sent. */
  model: string;
}

const ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** Whether `id` is 1–128 characters of `[A-Za-z0-9._:-]`: a session, user or run id. */
export function isValidId(id: unknown): id is string {
  return typeof id === "string" && ID.test(id);
}

/** The wire formats of `LLM_API`: Chat Completions, Anthropic Messages, OpenAI Responses. */
export const LLM_APIS = ["chat", "anthropic", "responses"] as const;

/** One of {@linkcode LLM_APIS}. */
export type LlmApi = typeof LLM_APIS[number];

/** The values of `reasoning_effort` that every provider taking the field accepts. */
export const REASONING_EFFORTS = ["low", "medium", "high"] as const;

/** How hard a reasoning model thinks before it answers, sent as `reasoning_effort`. */
export type ReasoningEffort = typeof REASONING_EFFORTS[number];

/** Whether the model may call the tools a request offers: `none` offers them without letting it. */
export type ToolChoice = "auto" | "none";

/**
 * How a turn ended. `invalid_output`: the answer did not match the turn's response format, even after one
 * repair request (it is stored all the same; the failure's `errors` say what is wrong). `budget`: its next
 * model call would have passed AGENT_MAX_TURN_TOKENS (a closing answer, like `max_steps`); `timeout`: it passed
 * AGENT_TURN_TIMEOUT_SECONDS and was taken back, like `aborted`.
 */
export type TurnOutcome =
  | "answered"
  | "max_steps"
  | "budget"
  | "empty"
  | "invalid_output"
  | "aborted"
  | "timeout"
  | "error"
  | "awaiting_approval";

/**
 * Why a turn ended without an answer. The model's client names its failures (`timeout`, `network`, `http`,
 * `invalid_response`, `too_large`, `script`; `internal` for anything else thrown by a model); `store`: the
 * session database went away; `lease`: this process lost the session's lease; `aborted`: the turn was
 * stopped (a client gone, Ctrl-C, the shutdown's grace over); `invalid_output`: the answer did not match the
 * turn's response format (the answer is stored, but it is not one a client asked for); `deadline`: the turn
 * passed its time limit.
 */
export type FailureKind = LlmErrorKind | "internal" | "store" | "lease" | "invalid_output" | "deadline";

/**
 * The failure of a turn that ended `error` (a model or store problem), `aborted` (stopped, a lease lost),
 * `timeout` (its deadline passed) or `invalid_output` (an answer that does not match the response format).
 */
export interface TurnFailure {
  kind: FailureKind;
  /** What went wrong, worded for a person; never a key. */
  message: string;
  /** The provider's HTTP status, when it answered. */
  status: number | null;
  /** Model calls retried before giving up. */
  retries: number;
  /** With `aborted`: the abort signal's reason (what stopped the turn), for the caller that set it. */
  cause?: unknown;
  /** With `invalid_output`: what is wrong with the answer, each as `path: what was expected`. */
  errors?: string[];
}

/** A tool call as reported back to the caller of a turn: what was called, and whether it succeeded. */
export type TurnToolCall = Pick<ToolCall, "name" | "arguments"> & Pick<ToolResult, "ok">;

/** What one user turn produced. */
export interface TurnResult {
  sessionId: string;
  runId: string;
  turn: number;
  outcome: TurnOutcome;
  answer: string;
  toolCalls: TurnToolCall[];
  usage: Usage;
  /** With `awaiting_approval`: the calls that wait for the user's decision. */
  approval?: { calls: ApprovalCall[] };
  /**
   * With `error`, `aborted` and `timeout`: why there is no answer (the `error` event's data says the same);
   * with `invalid_output`: why the answer is not usable (the `output_invalid` event says the same).
   */
  failure?: TurnFailure;
}

/** A tool call that waits for the user's approval, as events and the API show it. */
export type ApprovalCall = Pick<ToolCall, "id" | "name" | "arguments">;
