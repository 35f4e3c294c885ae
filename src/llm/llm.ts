/**
 * The one interface every model client implements.
 * @module
 */
import type { ChatReply, Message, ModelInfo, ResponseFormat, ToolChoice, ToolSchema } from "../types.ts";

/** Options of {@linkcode LLM.chat}. */
export interface ChatOptions {
  /** The tools the model may call; empty means a plain completion (summaries). @default {[]} */
  tools?: readonly ToolSchema[];
  /** Aborts the call; the client rejects with an `LlmError` of kind `aborted`. @default {undefined} */
  signal?: AbortSignal;
  /**
   * Called with each piece of answer text (never reasoning) as it arrives; the pieces join to the reply's
   * `content`. A client that does not stream may never call it. Must not throw, should return quickly.
   * @default {undefined}
   */
  onDelta?: (text: string) => void;
  /**
   * Called for each streamed piece of reasoning as it arrives, never with its text: a view may show that the
   * model is thinking. Only a client told to report reasoning calls it. Must not throw. @default {undefined}
   */
  onReasoning?: () => void;
  /** Sent to the provider as `response_format`: what the answer must be. @default {null} (plain text) */
  responseFormat?: ResponseFormat | null;
  /**
   * The same for every request of a session, so that they share the provider's prompt cache (Responses'
   * `prompt_cache_key`); a client may hash it and never sends it where the dialect has no such field.
   * @default {null}
   */
  cacheKey?: string | null;
  /**
   * Whether the model may call the tools offered: `none` offers them without letting it (a summary request
   * that shares the session's prefix, tools included, so the provider's prompt cache still hits).
   * @default {"auto"}
   */
  toolChoice?: ToolChoice;
}

/** A chat model: messages and tools in, one reply out. Fails only with `LlmError`. */
export interface LLM {
  chat(messages: Message[], options?: ChatOptions): Promise<ChatReply>;
  /** The provider and model asked for, when known (a test model has none). */
  readonly info?: ModelInfo;
}

/** The cache key of a session's requests (see {@linkcode ChatOptions.cacheKey}): its user and id. */
export function sessionCacheKey(key: { userId: string; sessionId: string }): string {
  return `${key.userId}/${key.sessionId}`;
}
