/**
 * The model client for any OpenAI-compatible Chat Completions endpoint (OpenAI, DeepSeek, a local server):
 * one POST per attempt under its own deadline, bounded retries of transient failures, and errors that name
 * the cause without ever showing the API key.
 * @module
 */
import type { Config } from "../config.ts";
import type { ChatReply, Message } from "../types.ts";
import { type AttemptContext, plainAttempt, streamAttempt } from "./_attempts.ts";
import { CANNOT_CREATE, requireFunction, requireNumber, sleep } from "./_fetch_helpers.ts";
import { Failures } from "./_failures.ts";
import { serializeRequestBody } from "./_wire.ts";
import type { ChatOptions, LLM } from "./llm.ts";

export { buildRequestBody, parseCompletion, serializeRequestBody } from "./_wire.ts";
export type {
  ChatCompletionRequestBody,
  ParseCompletionOptions,
  WireMessage,
  WireTool,
  WireToolCall,
} from "./_wire.ts";

/** Longest wait a provider's `Retry-After` may impose: beyond it, failing is more useful than hanging. */
const MAX_RETRY_AFTER_MS = 60_000;

/** What {@linkcode OpenAICompatibleLLMOptions.onRetry} learns before each retry. */
export interface RetryInfo {
  /** Which attempt failed: 1 is the first request. */
  attempt: number;
  /** How long the client waits before the next attempt (backoff, or the provider's `Retry-After`). */
  delayMs: number;
  /** Why the attempt failed, worded as the final error would be; never contains the API key. */
  reason: string;
}

/** Options of {@linkcode OpenAICompatibleLLM}. */
export interface OpenAICompatibleLLMOptions {
  /** The API root without a trailing slash, e.g. `https://api.openai.com/v1`. Required. */
  baseUrl: string;
  /**
   * Sent as `Authorization: Bearer <key>`; empty sends no Authorization header (local servers).
   * @default {""}
   */
  apiKey?: string;
  /** The model name sent with every request. Required. */
  model: string;
  /**
   * Deadline of one attempt, streamed or not: from sending the request to the last byte of the reply. Nothing
   * extends it, not a stream that keeps sending text nor one that sends only keep-alive comments; each retry
   * gets a fresh one. Past it, the attempt fails with kind `timeout`, its message naming this deadline.
   * @default {60}
   */
  timeoutSeconds?: number;
  /**
   * Stream the answer: send `stream: true` (with `stream_options.include_usage`), read the Server-Sent
   * Events and pass answer text to {@linkcode ChatOptions.onDelta} as it arrives. The reply is the one the
   * non-streaming call would return. `main` decides, from `AGENT_STREAM`.
   * @default {false}
   */
  stream?: boolean;
  /**
   * When streaming, the longest silence allowed between two chunks of the body after the first one; any
   * bytes restart it, keep-alive comments included. It only ever ends an attempt earlier than
   * `timeoutSeconds` would; the message names which of the two passed.
   * @default {timeoutSeconds}
   */
  idleTimeoutSeconds?: number;
  /**
   * The largest reply accepted, in bytes of the response body as it arrives (the whole JSON body, or every
   * byte of the event stream, comments included). Counted while reading: past it the attempt stops at once
   * and `chat` fails with kind `too_large`, never retried. An error (non-2xx) body is kept only up to
   * 16 KiB, or this limit if smaller.
   * @default {1048576}
   */
  maxReplyBytes?: number;
  /**
   * Retries of a timeout, a network failure or HTTP 408/409/429/5xx; 0 tries once.
   * @default {2}
   */
  retries?: number;
  /**
   * Backoff base: retry n (from 0) waits base·2^n seconds unless the provider sent `Retry-After`.
   * @default {0.5}
   */
  retryBaseDelaySeconds?: number;
  /**
   * The fetch implementation; tests inject a stub.
   * @default {globalThis.fetch}
   */
  fetch?: typeof globalThis.fetch;
  /**
   * Waits between attempts. Must settle (resolve or reject) promptly when `signal` aborts.
   * @default {a setTimeout-based sleep that rejects on abort and clears its timer}
   */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  /**
   * The clock an HTTP-date `Retry-After` is measured against, in epoch milliseconds.
   * @default {Date.now}
   */
  now?: () => number;
  /**
   * Called before each retry, for the trace and the REPL. Must not throw.
   * @default {undefined}
   */
  onRetry?: (info: RetryInfo) => void;
}

/**
 * An {@linkcode LLM} over HTTP: POSTs `{model, messages, tools?}` to `{baseUrl}/chat/completions`.
 *
 * Each attempt has its own `timeoutSeconds` deadline, from request to last byte. A reply body past
 * `maxReplyBytes` is dropped as it arrives: `too_large`, never retried. Timeouts, network failures and HTTP 408/409/429/5xx
 * are retried up to `retries` times with exponential backoff (or the provider's `Retry-After`, capped at
 * 60 s); other statuses and unreadable bodies fail at once. The caller's `signal` aborts at any point,
 * waits included. `chat` rejects only with `LlmError`, whose message names the cause and never contains
 * the API key, except for `TypeError` on a malformed message (see {@linkcode buildRequestBody}) and
 * whatever `onDelta` throws.
 *
 * With `stream`, the body is read as Server-Sent Events: `timeoutSeconds` still bounds the whole attempt
 * and `idleTimeoutSeconds` each silence after the first byte. A failure is retried only before the first body byte
 * arrived; after it, a broken, stalled or malformed stream fails at once, so no answer text is ever shown
 * twice. A stream must end with `[DONE]` or at least carry a `finish_reason`. A server that ignores
 * `stream` and answers with one JSON completion is read as such, its text passed to `onDelta` in one piece.
 */
export class OpenAICompatibleLLM implements LLM {
  #context: AttemptContext;
  #failures: Failures;
  #model: string;
  #stream: boolean;
  #retries: number;
  #retryBaseDelaySeconds: number;
  #sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
  #onRetry: ((info: RetryInfo) => void) | undefined;

  /** Validates the options: `TypeError` for a wrong type or URL, `RangeError` for a number out of range. */
  constructor(options: OpenAICompatibleLLMOptions) {
    const {
      baseUrl,
      apiKey = "",
      model,
      timeoutSeconds = 60,
      stream = false,
      idleTimeoutSeconds = timeoutSeconds,
      maxReplyBytes = 1_048_576,
      retries = 2,
      retryBaseDelaySeconds = 0.5,
      fetch = globalThis.fetch,
      sleep: sleepFn = sleep,
      now = Date.now,
      onRetry,
    } = options;
    let url: URL;
    try {
      url = new URL(baseUrl);
    } catch {
      throw new TypeError(`${CANNOT_CREATE}: "baseUrl" must be an http(s) URL, got ${String(baseUrl)}`);
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw new TypeError(`${CANNOT_CREATE}: "baseUrl" must be an http(s) URL, got ${url.protocol}`);
    }
    if (typeof apiKey !== "string") {
      throw new TypeError(`${CANNOT_CREATE}: "apiKey" must be a string, got ${typeof apiKey}`);
    }
    if (typeof model !== "string" || model.trim() === "") {
      throw new TypeError(`${CANNOT_CREATE}: "model" must be a non-empty string`);
    }
    requireNumber("timeoutSeconds", timeoutSeconds, "a number greater than 0", (n) => n > 0);
    if (typeof stream !== "boolean") {
      throw new TypeError(`${CANNOT_CREATE}: "stream" must be a boolean, got ${typeof stream}`);
    }
    requireNumber("idleTimeoutSeconds", idleTimeoutSeconds, "a number greater than 0", (n) => n > 0);
    requireNumber(
      "maxReplyBytes",
      maxReplyBytes,
      "a whole number of 1 or more",
      (n) => Number.isInteger(n) && n >= 1,
    );
    requireNumber("retries", retries, "a whole number of 0 or more", (n) => Number.isInteger(n) && n >= 0);
    requireNumber("retryBaseDelaySeconds", retryBaseDelaySeconds, "a number of 0 or more", (n) => n >= 0);
    requireFunction("fetch", fetch);
    requireFunction("sleep", sleepFn);
    requireFunction("now", now);
    requireFunction("onRetry", onRetry);

    const named = { host: url.host, model, apiKey, timeoutSeconds, idleTimeoutSeconds, maxReplyBytes, now };
    this.#failures = new Failures(named);
    this.#context = {
      ...named,
      // Config already strips trailing slashes; a hand-built client must not produce "//chat/completions".
      url: `${baseUrl.replace(/\/+$/, "")}/chat/completions`,
      fetch,
      failures: this.#failures,
    };
    this.#model = model;
    this.#stream = stream;
    this.#retries = retries;
    this.#retryBaseDelaySeconds = retryBaseDelaySeconds;
    this.#sleep = sleepFn;
    this.#onRetry = onRetry;
  }

  /** Sends one chat request, retrying transient failures; see the class documentation for the contract. */
  async chat(messages: Message[], options: ChatOptions = {}): Promise<ChatReply> {
    const { tools = [], signal, onDelta } = options;
    // Built once: every attempt sends the same bytes.
    const body = serializeRequestBody(this.#model, messages, tools, { stream: this.#stream });
    for (let retries = 0;; retries++) {
      if (signal?.aborted) throw this.#failures.final(this.#failures.aborted(), retries);
      const outcome = this.#stream
        ? await streamAttempt(this.#context, body, signal, onDelta)
        : await plainAttempt(this.#context, body, signal);
      if (outcome.ok) return retries === 0 ? outcome.reply : { ...outcome.reply, retries };
      const { failure } = outcome;
      if (!failure.retryable || retries >= this.#retries) throw this.#failures.final(failure, retries);

      const delayMs = failure.retryAfterMs === null
        ? this.#retryBaseDelaySeconds * 1000 * 2 ** retries
        : Math.min(failure.retryAfterMs, MAX_RETRY_AFTER_MS);
      this.#onRetry?.({ attempt: retries + 1, delayMs, reason: failure.message });
      const wait = this.#sleep;
      try {
        await wait(delayMs, signal);
      } catch (error) {
        // An aborted wait is reported as an abort at the top of the loop; anything else is a broken sleep.
        if (!signal?.aborted) throw error;
      }
      if (signal?.aborted) throw this.#failures.final(this.#failures.aborted(), retries);
    }
  }
}

/**
 * The client for a loaded configuration: its endpoint, key, model, timeout, reply size and retry settings. Streaming is
 * the caller's choice (`options.stream`, off by default); tests may inject `fetch`, `sleep` and `now`.
 */
export function createLlmFromConfig(
  config: Readonly<Config>,
  options: Pick<OpenAICompatibleLLMOptions, "fetch" | "onRetry" | "stream" | "sleep" | "now"> = {},
): OpenAICompatibleLLM {
  return new OpenAICompatibleLLM({
    baseUrl: config.baseUrl,
    apiKey: config.apiKey,
    model: config.model,
    timeoutSeconds: config.llmTimeoutSeconds,
    maxReplyBytes: config.llmMaxReplyBytes,
    retries: config.llmRetries,
    retryBaseDelaySeconds: config.llmRetryBaseDelay,
    ...options,
  });
}
