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
  buildRequestBody,
  invalidResponseError,
  parseCompletion,
  parseRetryAfter,
  providerErrorMessage,
  quoteBody,
} from "./_wire.ts";
import type { ChatOptions, LLM } from "./llm.ts";

export { buildRequestBody, parseCompletion } from "./_wire.ts";
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
   * Deadline of one attempt, headers and body included.
   * @default {60}
   */
  timeoutSeconds?: number;
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

/** One failed attempt, classified. */
interface Failure {
  kind: LlmErrorKind;
  /** Already redacted. */
  message: string;
  status: number | null;
  retryable: boolean;
  /** The provider's `Retry-After` in ms, which replaces the backoff for this retry. */
  retryAfterMs: number | null;
}

/** The result of one attempt: a reply, or why there is none. A streaming attempt will return the same. */
type Attempt = { ok: true; reply: ChatReply } | { ok: false; failure: Failure };

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** The messages of an error and its causes, with URLs cut to their host (no path, no query). */
function describeThrown(error: unknown): string {
  const parts: string[] = [];
  let current: unknown = error;
  for (let depth = 0; current !== undefined && current !== null && depth < 4; depth++) {
    const text = current instanceof Error ? current.message : String(current);
    if (text !== "" && !parts.includes(text)) parts.push(text);
    current = current instanceof Error ? current.cause : undefined;
  }
  return parts.join(": ").replace(/https?:\/\/[^\s)]+/g, (url) => {
    try {
      return new URL(url).host;
    } catch {
      return "[url]";
    }
  });
}

function isRetryableStatus(status: number): boolean {
  return status === 408 || status === 409 || status === 429 || (status >= 500 && status < 600);
}

const CANNOT_CREATE = "Cannot create OpenAICompatibleLLM";

function requireFunction(name: string, value: unknown): void {
  if (value !== undefined && typeof value !== "function") {
    throw new TypeError(`${CANNOT_CREATE}: "${name}" must be a function, got ${typeof value}`);
  }
}

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
 * An {@linkcode LLM} over HTTP: POSTs `{model, messages, tools?}` to `{baseUrl}/chat/completions`.
 *
 * Each attempt has its own `timeoutSeconds` deadline. Timeouts, network failures and HTTP 408/409/429/5xx
 * are retried up to `retries` times with exponential backoff (or the provider's `Retry-After`, capped at
 * 60 s); other statuses and unreadable bodies fail at once. The caller's `signal` aborts at any point,
 * waits included. `chat` rejects only with `LlmError`, whose message names the cause and never contains
 * the API key, except for `TypeError` on a malformed message (see {@linkcode buildRequestBody}).
 */
export class OpenAICompatibleLLM implements LLM {
  #url: string;
  #host: string;
  #apiKey: string;
  #model: string;
  #timeoutSeconds: number;
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
    this.#retries = retries;
    this.#retryBaseDelaySeconds = retryBaseDelaySeconds;
    this.#fetch = fetch;
    this.#sleep = sleepFn;
    this.#now = now;
    this.#onRetry = onRetry;
  }

  /** Sends one chat request, retrying transient failures; see the class documentation for the contract. */
  async chat(messages: Message[], options: ChatOptions = {}): Promise<ChatReply> {
    const { tools = [], signal } = options;
    // Built once: every attempt sends the same bytes.
    const body = JSON.stringify(buildRequestBody(this.#model, messages, tools));
    for (let retries = 0;; retries++) {
      if (signal?.aborted) throw this.#finalError(this.#abortedFailure(), retries);
      const outcome = await this.#attempt(body, signal);
      if (outcome.ok) return outcome.reply;
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
    const headers: Record<string, string> = { "Content-Type": "application/json" };
    if (this.#apiKey !== "") headers.Authorization = `Bearer ${this.#apiKey}`;
    const fetch = this.#fetch;
    let response: Response;
    let text: string;
    try {
      response = await fetch(this.#url, { method: "POST", headers, body, signal: combined });
      // Reading the whole body under the same deadline also frees it, whatever the status.
      text = await response.text();
    } catch (error) {
      if (signal?.aborted) return { ok: false, failure: this.#abortedFailure() };
      if (deadline.signal.aborted) {
        return {
          ok: false,
          failure: this.#failure("timeout", `LLM request timed out after ${this.#timeoutSeconds} s`, true),
        };
      }
      const message = `LLM host ${this.#host} is unreachable: ${describeThrown(error)}`;
      // fetch signals network failures with TypeError; anything else is a broken fetch, not worth retrying.
      return { ok: false, failure: this.#failure("network", message, error instanceof TypeError) };
    } finally {
      clearTimeout(timer);
    }
    if (!response.ok) return { ok: false, failure: this.#httpFailure(response, text) };
    return this.#parse(text);
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
      if (!(error instanceof LlmError)) throw error;
      return { ok: false, failure: this.#failure("invalid_response", error.message, false) };
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

/** The client for a loaded configuration: its endpoint, key, model, timeout and retry settings. */
export function createLlmFromConfig(
  config: Readonly<Config>,
  options: Pick<OpenAICompatibleLLMOptions, "fetch" | "onRetry"> = {},
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
