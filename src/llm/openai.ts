/**
 * The model client for any OpenAI-compatible Chat Completions endpoint (OpenAI, DeepSeek, a local server):
 * one POST per attempt under its own deadline, bounded retries of transient failures, and errors that name
 * the cause without ever showing the API key.
 * @module
 */
import type { Config } from "../config.ts";
import { LlmError, type LlmErrorKind } from "../errors.ts";
import type { ChatReply, Message } from "../types.ts";
import {
  invalidResponseError,
  parseCompletion,
  parseRetryAfter,
  providerErrorMessage,
  quoteBody,
  serializeRequestBody,
} from "./_wire.ts";
import { ReplyAssembler } from "./_reply_assembler.ts";
import { SseParser } from "./_sse.ts";
import {
  type Attempt,
  CANNOT_CREATE,
  describeThrown,
  type Failure,
  isJsonResponse,
  isRetryableStatus,
  readOrAbort,
  requireFunction,
  requireNumber,
  sleep,
} from "./_fetch_helpers.ts";
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
   * Deadline of one attempt: headers and body included, or when streaming, until the first byte of the body.
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
   * When streaming, the longest silence allowed between two chunks of the body after the first one.
   * @default {timeoutSeconds}
   */
  idleTimeoutSeconds?: number;
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
 * Each attempt has its own `timeoutSeconds` deadline. Timeouts, network failures and HTTP 408/409/429/5xx
 * are retried up to `retries` times with exponential backoff (or the provider's `Retry-After`, capped at
 * 60 s); other statuses and unreadable bodies fail at once. The caller's `signal` aborts at any point,
 * waits included. `chat` rejects only with `LlmError`, whose message names the cause and never contains
 * the API key, except for `TypeError` on a malformed message (see {@linkcode buildRequestBody}) and
 * whatever `onDelta` throws.
 *
 * With `stream`, the body is read as Server-Sent Events: `timeoutSeconds` bounds the wait for its first
 * byte and `idleTimeoutSeconds` each silence after it. A failure is retried only before the first body byte
 * arrived; after it, a broken, stalled or malformed stream fails at once, so no answer text is ever shown
 * twice. A stream must end with `[DONE]` or at least carry a `finish_reason`. A server that ignores
 * `stream` and answers with one JSON completion is read as such, its text passed to `onDelta` in one piece.
 */
export class OpenAICompatibleLLM implements LLM {
  #url: string;
  #host: string;
  #apiKey: string;
  #model: string;
  #timeoutSeconds: number;
  #stream: boolean;
  #idleTimeoutSeconds: number;
  #retries: number;
  #retryBaseDelaySeconds: number;
  #fetch: typeof globalThis.fetch;
  #sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
  #now: () => number;
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
    requireNumber("retries", retries, "a whole number of 0 or more", (n) => Number.isInteger(n) && n >= 0);
    requireNumber("retryBaseDelaySeconds", retryBaseDelaySeconds, "a number of 0 or more", (n) => n >= 0);
    requireFunction("fetch", fetch);
    requireFunction("sleep", sleepFn);
    requireFunction("now", now);
    requireFunction("onRetry", onRetry);

    // Config already strips trailing slashes; a hand-built client must not produce "//chat/completions".
    this.#url = `${baseUrl.replace(/\/+$/, "")}/chat/completions`;
    this.#host = url.host;
    this.#apiKey = apiKey;
    this.#model = model;
    this.#timeoutSeconds = timeoutSeconds;
    this.#stream = stream;
    this.#idleTimeoutSeconds = idleTimeoutSeconds;
    this.#retries = retries;
    this.#retryBaseDelaySeconds = retryBaseDelaySeconds;
    this.#fetch = fetch;
    this.#sleep = sleepFn;
    this.#now = now;
    this.#onRetry = onRetry;
  }

  /** Sends one chat request, retrying transient failures; see the class documentation for the contract. */
  async chat(messages: Message[], options: ChatOptions = {}): Promise<ChatReply> {
    const { tools = [], signal, onDelta } = options;
    // Built once: every attempt sends the same bytes.
    const body = serializeRequestBody(this.#model, messages, tools, { stream: this.#stream });
    for (let retries = 0;; retries++) {
      if (signal?.aborted) throw this.#finalError(this.#abortedFailure(), retries);
      const outcome = this.#stream
        ? await this.#streamAttempt(body, signal, onDelta)
        : await this.#attempt(body, signal);
      if (outcome.ok) return retries === 0 ? outcome.reply : { ...outcome.reply, retries };
      const { failure } = outcome;
      if (!failure.retryable || retries >= this.#retries) throw this.#finalError(failure, retries);

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
      if (signal?.aborted) throw this.#finalError(this.#abortedFailure(), retries);
    }
  }

  /** One POST under its own deadline. Never throws: every failure comes back classified. */
  async #attempt(body: string, signal: AbortSignal | undefined): Promise<Attempt> {
    const deadline = new AbortController();
    const timer = setTimeout(
      () => deadline.abort(new DOMException("LLM request timed out", "TimeoutError")),
      this.#timeoutSeconds * 1000,
    );
    const combined = signal === undefined ? deadline.signal : AbortSignal.any([signal, deadline.signal]);
    const fetch = this.#fetch;
    let response: Response | undefined;
    let text: string;
    try {
      response = await fetch(this.#url, { method: "POST", headers: this.#headers(), body, signal: combined });
      // Reading the whole body under the same deadline also frees it, whatever the status.
      text = await response.text();
    } catch (error) {
      const failure = this.#thrownFailure(error, signal, deadline.signal);
      // The host answered and then the body broke: say so, rather than "unreachable" (still retried).
      if (response !== undefined && failure.kind === "network") {
        failure.message = this.#failure(
          "network",
          `LLM response from ${this.#host} broke mid-body (HTTP ${response.status}): ${
            describeThrown(error)
          }`,
          failure.retryable,
        ).message;
      }
      return { ok: false, failure };
    } finally {
      clearTimeout(timer);
    }
    if (!response.ok) return { ok: false, failure: this.#httpFailure(response, text) };
    return this.#parse(text);
  }

  /**
   * One streaming POST, its body read as Server-Sent Events under the first-byte deadline, then the idle
   * one. Never throws, except what `onDelta` throws; clears its timer and cancels the body on every path.
   */
  async #streamAttempt(
    body: string,
    signal: AbortSignal | undefined,
    onDelta: ((text: string) => void) | undefined,
  ): Promise<Attempt> {
    const deadline = new AbortController();
    const expire = (seconds: number) =>
      setTimeout(
        () => deadline.abort(new DOMException("LLM request timed out", "TimeoutError")),
        seconds * 1000,
      );
    let timer = expire(this.#timeoutSeconds);
    const combined = signal === undefined ? deadline.signal : AbortSignal.any([signal, deadline.signal]);
    const fetch = this.#fetch;
    let reader: ReadableStreamDefaultReader<Uint8Array> | undefined;
    try {
      let response: Response;
      let text: string | undefined;
      try {
        const headers = this.#headers(true);
        response = await fetch(this.#url, { method: "POST", headers, body, signal: combined });
        if (!response.ok || response.body === null || isJsonResponse(response)) text = await response.text();
      } catch (error) {
        return { ok: false, failure: this.#thrownFailure(error, signal, deadline.signal) };
      }
      if (!response.ok) return { ok: false, failure: this.#httpFailure(response, text ?? "") };
      if (text !== undefined || response.body === null) {
        // A server that ignores `stream: true` sends one whole completion.
        const outcome = this.#parse(text ?? "");
        if (outcome.ok && outcome.reply.content) onDelta?.(outcome.reply.content);
        return outcome;
      }
      reader = response.body.getReader();
      const parser = new SseParser();
      const assembler = new ReplyAssembler({ model: this.#model, source: this.#host });
      let bytes = 0;
      while (!assembler.done) {
        let chunk: ReadableStreamReadResult<Uint8Array>;
        try {
          chunk = await readOrAbort(reader, combined);
        } catch (error) {
          const failure = bytes === 0
            ? this.#thrownFailure(error, signal, deadline.signal)
            : this.#brokenStreamFailure(error, signal, deadline.signal, bytes);
          return { ok: false, failure };
        }
        if (!chunk.done && chunk.value.byteLength > 0) {
          bytes += chunk.value.byteLength;
          clearTimeout(timer);
          timer = expire(this.#idleTimeoutSeconds);
        }
        for (const event of chunk.done ? parser.end() : parser.push(chunk.value)) {
          let piece: string;
          try {
            piece = assembler.add(event);
          } catch (error) {
            return { ok: false, failure: this.#invalidFailure(error) };
          }
          if (signal?.aborted) return { ok: false, failure: this.#abortedFailure() };
          if (piece !== "") onDelta?.(piece);
          if (assembler.done) break;
        }
        if (chunk.done) break;
      }
      if (signal?.aborted) return { ok: false, failure: this.#abortedFailure() };
      if (!assembler.complete) {
        const reason = `the stream ended after ${bytes} bytes without [DONE] or a finish_reason`;
        return { ok: false, failure: this.#invalidFailure(invalidResponseError(reason, this.#host)) };
      }
      try {
        return { ok: true, reply: assembler.reply() };
      } catch (error) {
        return { ok: false, failure: this.#invalidFailure(error) };
      }
    } finally {
      clearTimeout(timer);
      // Frees the connection when the stream stops early ([DONE], an error); a no-op on a finished body.
      await reader?.cancel().catch(() => {});
    }
  }

  #headers(stream = false): Record<string, string> {
    const headers: Record<string, string> = { "Content-Type": "application/json" };
    if (stream) headers.Accept = "text/event-stream";
    if (this.#apiKey !== "") headers.Authorization = `Bearer ${this.#apiKey}`;
    return headers;
  }

  /** A request that threw before any body byte arrived: an abort, the deadline, or the network. */
  #thrownFailure(error: unknown, signal: AbortSignal | undefined, deadline: AbortSignal): Failure {
    if (signal?.aborted) return this.#abortedFailure();
    if (deadline.aborted) {
      return this.#failure("timeout", `LLM request timed out after ${this.#timeoutSeconds} s`, true);
    }
    const message = `LLM host ${this.#host} is unreachable: ${describeThrown(error)}`;
    // fetch signals network failures with TypeError; anything else is a broken fetch, not worth retrying.
    return this.#failure("network", message, error instanceof TypeError);
  }

  /** A stream that stopped after some of it arrived: never retried, the caller may have shown its text. */
  #brokenStreamFailure(
    error: unknown,
    signal: AbortSignal | undefined,
    deadline: AbortSignal,
    bytes: number,
  ): Failure {
    if (signal?.aborted) return this.#abortedFailure();
    if (deadline.aborted) {
      const message = `LLM stream from ${this.#host} stalled: no data for ${this.#idleTimeoutSeconds} s ` +
        `after ${bytes} bytes`;
      return this.#failure("timeout", message, false);
    }
    const message = `LLM stream from ${this.#host} broke after ${bytes} bytes: ${describeThrown(error)}`;
    return this.#failure("network", message, false);
  }

  #invalidFailure(error: unknown): Failure {
    if (!(error instanceof LlmError)) throw error;
    return this.#failure("invalid_response", error.message, false);
  }

  #parse(text: string): Attempt {
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      const error = invalidResponseError(`body is not JSON: ${quoteBody(text)}`, this.#host);
      return { ok: false, failure: this.#failure("invalid_response", error.message, false) };
    }
    try {
      return { ok: true, reply: parseCompletion(json, { model: this.#model, source: this.#host }) };
    } catch (error) {
      return { ok: false, failure: this.#invalidFailure(error) };
    }
  }

  #httpFailure(response: Response, text: string): Failure {
    const { status } = response;
    let detail: string | null = null;
    try {
      detail = providerErrorMessage(JSON.parse(text));
    } catch {
      // Not JSON (an HTML error page, a proxy's text): quote the text itself below.
    }
    detail = quoteBody(detail ?? text) || response.statusText;
    const said = detail === "" ? "" : `: ${detail}`;
    const message = `LLM request failed: HTTP ${status} from ${this.#host}${said}`;
    const retryable = isRetryableStatus(status);
    const failure = this.#failure("http", message, retryable, status);
    if (retryable) failure.retryAfterMs = parseRetryAfter(response.headers.get("retry-after"), this.#now());
    return failure;
  }

  #abortedFailure(): Failure {
    return this.#failure("aborted", "LLM request was aborted", false);
  }

  /** Every failure message passes through here, so the key cannot leak from any provider or fetch text. */
  #failure(kind: LlmErrorKind, message: string, retryable: boolean, status: number | null = null): Failure {
    const redacted = this.#apiKey === "" ? message : message.replaceAll(this.#apiKey, "[redacted]");
    return { kind, message: redacted, status, retryable, retryAfterMs: null };
  }

  #finalError(failure: Failure, retries: number): LlmError {
    const attempts = retries > 0 ? ` (${retries + 1} attempts)` : "";
    return new LlmError(`${failure.message}${attempts}`, {
      kind: failure.kind,
      status: failure.status,
      retries,
    });
  }
}

/**
 * The client for a loaded configuration: its endpoint, key, model, timeout and retry settings. Streaming is
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
    retries: config.llmRetries,
    retryBaseDelaySeconds: config.llmRetryBaseDelay,
    ...options,
  });
}
