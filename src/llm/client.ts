/**
 * The model client for the three wire formats (`LLM_API`): any OpenAI-compatible Chat Completions endpoint
 * (OpenAI, DeepSeek, a local server), Anthropic Messages, OpenAI Responses. One POST per attempt under its own
 * deadline, bounded retries of transient failures, and errors that name the cause without ever showing the
 * API key.
 * @module
 */
import { delay } from "../abort.ts";
import { retry, type RetryOptions } from "../retry.ts";
import type { Config } from "../config.ts";
import { LlmError } from "../errors.ts";
import { redact } from "../redact.ts";
import { chatSpan, inSpan, providerName, type SpanOptions } from "../telemetry.ts";
import { type ChatReply, type Message, REASONING_EFFORTS, type ReasoningEffort } from "../types.ts";
import { attempt } from "./_attempt.ts";
import { ABORTED, type AttemptContext, type Failure } from "./_failure.ts";
import type { ChatOptions, LLM } from "./llm.ts";
import type { ModelInfo } from "../types.ts";
import { modelOrigin } from "./wire.ts";
import { ANTHROPIC_MESSAGES } from "./anthropic.ts";
import { OPENAI_RESPONSES } from "./responses.ts";
import { CHAT_COMPLETIONS } from "./stream.ts";
import { type BodyOptions, type Dialect, LLM_APIS, type LlmApi } from "./dialect.ts";

export { buildRequestBody, parseCompletion, serializeRequestBody } from "./wire.ts";

/** Longest wait a provider's `Retry-After` may impose: beyond it, failing is more useful than hanging. */
const MAX_RETRY_AFTER_MS = 60_000;

/** What {@linkcode HttpLLMOptions.onRetry} learns before each retry. */
export interface RetryInfo {
  /** Which attempt failed: 1 is the first request. */
  attempt: number;
  /** How long the client waits before the next attempt (backoff, or the provider's `Retry-After`). */
  delayMs: number;
  /** Why the attempt failed, worded as the final error would be; never contains the API key. */
  reason: string;
}

/** The dialect of each `LLM_API`. */
export const DIALECTS: Readonly<Record<LlmApi, Dialect>> = {
  chat: CHAT_COMPLETIONS,
  anthropic: ANTHROPIC_MESSAGES,
  responses: OPENAI_RESPONSES,
};

/** Options of {@linkcode HttpLLM}. */
export interface HttpLLMOptions {
  /**
   * The wire format: `chat` (Chat Completions), `anthropic` (Messages), `responses` (OpenAI Responses).
   * @default {"chat"}
   */
  api?: LlmApi;
  /**
   * The API root without a trailing slash, to which the dialect's path is added: `https://api.openai.com/v1`
   * (`/chat/completions`, `/responses`), `https://api.anthropic.com` (`/v1/messages`). Required.
   */
  baseUrl: string;
  /**
   * Sent as `Authorization: Bearer <key>` (`x-api-key` to Anthropic); empty sends none (local servers).
   * @default {""}
   */
  apiKey?: string;
  /** The model name sent with every request. Required. */
  model: string;
  /** One attempt's deadline, request to last byte, never extended (kind `timeout`). @default {60} */
  timeoutSeconds?: number;
  /**
   * Sent as `reasoning_effort` with every request; a provider's 400 that names the field says to unset
   * AGENT_REASONING_EFFORT. @default {null} (not sent)
   */
  reasoningEffort?: ReasoningEffort | null;
  /** Tokens the model may think for before it answers (Anthropic's extended thinking). @default {null} (off) */
  thinkingBudget?: number | null;
  /** Most tokens of one reply; Messages requires one and gets 8192 unless set. @default {null} */
  maxOutputTokens?: number | null;
  /** Send `stream: true`, passing answer text to `onDelta` as it arrives; same reply. @default {false} */
  stream?: boolean;
  /**
   * When streaming, call a request's `onReasoning` as reasoning arrives (AGENT_SHOW_THINKING), so a view can
   * say the model is thinking; its text is never passed. @default {false}
   */
  reasoningProgress?: boolean;
  /** When streaming, the longest silence between chunks after the first. @default {timeoutSeconds} */
  idleTimeoutSeconds?: number;
  /** Largest reply body, counted as read (kind `too_large`); an error body keeps ≤ 16 KiB. @default {1048576} */
  maxReplyBytes?: number;
  /** Retries of a timeout, a network failure or HTTP 408/409/429/5xx; 0 tries once. @default {2} */
  retries?: number;
  /** Backoff base: retry n (from 0) waits base·2^n seconds unless the provider sent `Retry-After`. @default {0.5} */
  retryBaseDelaySeconds?: number;
  /** The fetch implementation; tests inject a stub. @default {globalThis.fetch} */
  fetch?: typeof globalThis.fetch;
  /** Waits between attempts; must settle promptly when `signal` aborts. @default {delay} */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  /** The clock an HTTP-date `Retry-After` is measured against, in epoch ms. @default {Date.now} */
  now?: () => number;
  /** Called before each retry, for the trace and the REPL. Must not throw. @default {undefined} */
  onRetry?: (info: RetryInfo) => void;
}

const CANNOT_CREATE = "Cannot create HttpLLM";

/** One attempt's failure, thrown so the retry loop sees it; the client turns it into an `LlmError`. */
class FailedAttempt extends Error {
  constructor(readonly failure: Failure) {
    super(failure.message);
    this.name = "FailedAttempt";
  }
}

/** Throws `TypeError` unless `value` has `type` (or, for an optional function, is undefined). */
function requireType(name: string, value: unknown, type: "string" | "boolean" | "function"): void {
  if (typeof value !== type && !(type === "function" && value === undefined)) {
    throw new TypeError(`${CANNOT_CREATE}: "${name}" must be a ${type}, got ${typeof value}`);
  }
}

/** Throws `TypeError` for a non-number, `RangeError` for a number outside `inRange`. */
function requireNumber(
  name: string,
  value: unknown,
  expected: string,
  inRange: (n: number) => boolean,
): void {
  if (typeof value !== "number") {
    throw new TypeError(`${CANNOT_CREATE}: "${name}" must be ${expected}, got ${typeof value}`);
  }
  if (!Number.isFinite(value) || !inRange(value)) {
    throw new RangeError(`${CANNOT_CREATE}: "${name}" must be ${expected}, got ${value}`);
  }
}

/**
 * An {@linkcode LLM} over HTTP: POSTs `{model, messages, tools?, response_format?, reasoning_effort?}` to
 * `{baseUrl}/chat/completions`.
 *
 * Timeouts, network failures and HTTP 408/409/429/5xx are retried up to `retries` times with exponential
 * backoff (or the provider's `Retry-After`, capped at 60 s); a reply past `maxReplyBytes`, other statuses
 * and unreadable bodies fail at once. A stream is retried only before its first body byte, so no answer
 * text is shown twice. Every reply has its `finishReason`: the choice's `finish_reason`, else `null`. A stream
 * that ends without `[DONE]` or a `finish_reason` fails, unless it carried tool calls: that reply comes back
 * with `finishReason: null`, cut off, for the loop to refuse its calls. The caller's `signal` aborts at any
 * point, waits included. `chat` rejects only with `LlmError`, never showing the API key, except for a
 * `TypeError` on a malformed message (see {@linkcode buildRequestBody}) and whatever `onDelta` throws.
 */
export class HttpLLM implements LLM {
  #context: AttemptContext;
  #reasoningProgress: boolean;
  /** How `chat` retries, all but the caller's signal. */
  #retry: RetryOptions;
  #span: SpanOptions<ChatReply>;
  #body: Omit<BodyOptions, "responseFormat" | "cacheKey" | "toolChoice">;

  /** Validates the options: `TypeError` for a wrong type or URL, `RangeError` for a number out of range. */
  constructor(options: HttpLLMOptions) {
    const {
      api = "chat",
      baseUrl,
      apiKey = "",
      model,
      timeoutSeconds = 60,
      reasoningEffort = null,
      thinkingBudget = null,
      maxOutputTokens = null,
      stream = false,
      reasoningProgress = false,
      idleTimeoutSeconds = timeoutSeconds,
      maxReplyBytes = 1_048_576,
      retries = 2,
      retryBaseDelaySeconds = 0.5,
      fetch = globalThis.fetch,
      sleep = delay,
      now = Date.now,
      onRetry,
    } = options;
    const url = URL.parse(baseUrl);
    if (url === null || (url.protocol !== "http:" && url.protocol !== "https:")) {
      const got = url === null ? String(baseUrl) : url.protocol;
      throw new TypeError(`${CANNOT_CREATE}: "baseUrl" must be an http(s) URL, got ${got}`);
    }
    if (!(LLM_APIS as readonly unknown[]).includes(api)) {
      throw new TypeError(`${CANNOT_CREATE}: "api" must be ${LLM_APIS.join(", ")}, got ${String(api)}`);
    }
    requireType("apiKey", apiKey, "string");
    if (typeof model !== "string" || model.trim() === "") {
      throw new TypeError(`${CANNOT_CREATE}: "model" must be a non-empty string`);
    }
    requireNumber("timeoutSeconds", timeoutSeconds, "a number greater than 0", (n) => n > 0);
    const whole = (min: number) => (n: number) => Number.isInteger(n) && n >= min;
    if (reasoningEffort !== null && !(REASONING_EFFORTS as readonly unknown[]).includes(reasoningEffort)) {
      const got = typeof reasoningEffort === "string"
        ? JSON.stringify(reasoningEffort)
        : typeof reasoningEffort;
      throw new TypeError(
        `${CANNOT_CREATE}: "reasoningEffort" must be ${REASONING_EFFORTS.join(", ")} or null, got ${got}`,
      );
    }
    for (const [name, value] of Object.entries({ thinkingBudget, maxOutputTokens })) {
      if (value !== null) requireNumber(name, value, "a whole number of 1 or more, or null", whole(1));
    }
    requireType("stream", stream, "boolean");
    requireType("reasoningProgress", reasoningProgress, "boolean");
    requireNumber("idleTimeoutSeconds", idleTimeoutSeconds, "a number greater than 0", (n) => n > 0);
    requireNumber("maxReplyBytes", maxReplyBytes, "a whole number of 1 or more", whole(1));
    requireNumber("retries", retries, "a whole number of 0 or more", whole(0));
    requireNumber("retryBaseDelaySeconds", retryBaseDelaySeconds, "a number of 0 or more", (n) => n >= 0);
    for (const [name, value] of Object.entries({ fetch, sleep, now, onRetry })) {
      requireType(name, value, "function");
    }

    const dialect = DIALECTS[api];
    const origin = modelOrigin(baseUrl, model);
    this.#context = {
      // Config already strips trailing slashes; a hand-built client must not produce "//chat/completions".
      url: `${baseUrl.replace(/\/+$/, "")}${dialect.path}`,
      dialect,
      host: url.host,
      model,
      origin,
      apiKey,
      reasoningEffort,
      stream,
      timeoutSeconds,
      idleTimeoutSeconds,
      maxReplyBytes,
      fetch,
      now,
    };
    this.#reasoningProgress = reasoningProgress;
    this.#body = { model, stream, origin, reasoningEffort, thinkingBudget, maxOutputTokens };
    this.#retry = {
      maxAttempts: retries + 1,
      minTimeout: retryBaseDelaySeconds * 1000,
      multiplier: 2,
      maxTimeout: Infinity,
      isRetriable: (error) => error instanceof FailedAttempt && error.failure.retryable,
      retryAfter: (error) => {
        const { retryAfterMs } = (error as FailedAttempt).failure;
        return retryAfterMs === null ? undefined : Math.min(retryAfterMs, MAX_RETRY_AFTER_MS);
      },
      onRetry: (error, number, delayMs) => {
        const reason = this.#redact((error as FailedAttempt).failure.message);
        onRetry?.({ attempt: number, delayMs, reason });
      },
      delay: sleep,
    };
    this.#span = chatSpan(url, model);
    this.info = Object.freeze({ provider: providerName(url.hostname), model });
  }

  /** The provider (by the endpoint's host) and the model every request asks for. */
  readonly info: ModelInfo;

  /** Sends one chat request, retrying transient failures; see the class documentation for the contract. */
  chat(messages: Message[], options: ChatOptions = {}): Promise<ChatReply> {
    return inSpan(`chat ${this.#context.model}`, () => this.#chat(messages, options), this.#span);
  }

  async #chat(messages: Message[], options: ChatOptions): Promise<ChatReply> {
    const { tools = [], signal, onDelta, onReasoning, responseFormat = null, cacheKey = null } = options;
    const { toolChoice = "auto" } = options;
    const progress = { onDelta, onReasoning: this.#reasoningProgress ? onReasoning : undefined };
    // Built once: every attempt sends the same bytes.
    const body = this.#context.dialect.body(messages, tools, {
      ...this.#body,
      responseFormat,
      cacheKey,
      toolChoice,
    });
    let retries = 0;
    try {
      const reply = await retry(async (number) => {
        retries = number - 1;
        const outcome = await attempt(this.#context, body, signal, progress);
        if (outcome.ok) return outcome.reply;
        throw new FailedAttempt(outcome.failure);
      }, { ...this.#retry, signal });
      return retries === 0 ? reply : { ...reply, retries };
    } catch (error) {
      if (error instanceof FailedAttempt) throw this.#error(error.failure, retries);
      // An abort (before an attempt or during a wait) is reported as one; anything else is a broken sleep.
      if (signal?.aborted) throw this.#error(ABORTED, retries);
      throw error;
    }
  }

  #redact(text: string): string {
    return redact(text, [this.#context.apiKey]);
  }

  #error(failure: Failure, retries: number): LlmError {
    const attempts = retries > 0 ? ` (${retries + 1} attempts)` : "";
    const { kind, status } = failure;
    return new LlmError(`${this.#redact(failure.message)}${attempts}`, { kind, status, retries });
  }
}

/**
 * The client for a loaded configuration: its wire format, endpoint, key, model, reasoning effort or thinking
 * budget, output limit, whether it reports
 * reasoning's arrival, timeout, reply size and retry settings.
 * Streaming is the caller's choice (`options.stream`); tests may inject `fetch`, `sleep` and `now`.
 */
export function createLlmFromConfig(
  config: Readonly<Config>,
  options: Pick<HttpLLMOptions, "fetch" | "onRetry" | "stream" | "sleep" | "now"> = {},
): HttpLLM {
  return new HttpLLM({
    api: config.api,
    baseUrl: config.baseUrl,
    apiKey: config.apiKey,
    model: config.model,
    reasoningEffort: config.reasoningEffort,
    thinkingBudget: config.thinkingBudget,
    maxOutputTokens: config.maxOutputTokens,
    reasoningProgress: config.showThinking,
    timeoutSeconds: config.llmTimeoutSeconds,
    maxReplyBytes: config.llmMaxReplyBytes,
    retries: config.llmRetries,
    retryBaseDelaySeconds: config.llmRetryBaseDelay,
    ...options,
  });
}
