/**
 * How the fetch client names what went wrong: every failed attempt becomes a classified, redacted
 * {@linkcode Failure}, and the last one the `LlmError` the caller sees. Private to `openai.ts`.
 * @module
 */
import { LlmError, type LlmErrorKind } from "../errors.ts";
import {
  type Attempt,
  type DeadlineName,
  describeThrown,
  type Failure,
  isRetryableStatus,
} from "./_fetch_helpers.ts";
import {
  invalidResponseError,
  parseCompletion,
  parseRetryAfter,
  providerErrorMessage,
  quoteBody,
} from "./_wire.ts";

/** What the messages name: the host (never the URL's path), the limits, and the key to keep out. */
export interface FailureContext {
  host: string;
  model: string;
  apiKey: string;
  timeoutSeconds: number;
  idleTimeoutSeconds: number;
  /** The largest reply body accepted, in bytes. */
  maxReplyBytes: number;
  /** The clock an HTTP-date `Retry-After` is measured against, in epoch milliseconds. */
  now: () => number;
}

/** Builds the client's failures, each passing through one redaction so the key cannot leak from any text. */
export class Failures {
  #context: FailureContext;

  constructor(context: FailureContext) {
    this.#context = context;
  }

  /** A request that threw before any body byte arrived: an abort, the deadline, or the network. */
  thrown(error: unknown, signal: AbortSignal | undefined, deadline: AbortSignal): Failure {
    if (signal?.aborted) return this.aborted();
    const { host, timeoutSeconds } = this.#context;
    if (deadline.aborted) {
      return this.make("timeout", `LLM request timed out after ${timeoutSeconds} s`, true);
    }
    const message = `LLM host ${host} is unreachable: ${describeThrown(error)}`;
    // fetch signals network failures with TypeError; anything else is a broken fetch, not worth retrying.
    return this.make("network", message, error instanceof TypeError);
  }

  /** The host answered (HTTP `status`) and then the body broke: said so, rather than "unreachable". */
  brokenBody(error: unknown, status: number, retryable: boolean): Failure {
    const message = `LLM response from ${this.#context.host} broke mid-body (HTTP ${status}): ${
      describeThrown(error)
    }`;
    return this.make("network", message, retryable);
  }

  /** A stream that stopped after some of it arrived: never retried, the caller may have shown its text. */
  brokenStream(
    error: unknown,
    signal: AbortSignal | undefined,
    passed: DeadlineName | null,
    bytes: number,
  ): Failure {
    if (signal?.aborted) return this.aborted();
    const { host, timeoutSeconds, idleTimeoutSeconds } = this.#context;
    if (passed === "whole") {
      const message = `LLM stream from ${host} ran past the ${timeoutSeconds} s deadline of the whole call ` +
        `after ${bytes} bytes`;
      return this.make("timeout", message, false);
    }
    if (passed === "idle") {
      const message =
        `LLM stream from ${host} stalled: no data for ${idleTimeoutSeconds} s after ${bytes} bytes`;
      return this.make("timeout", message, false);
    }
    const message = `LLM stream from ${host} broke after ${bytes} bytes: ${describeThrown(error)}`;
    return this.make("network", message, false);
  }

  /** A reply body past `maxReplyBytes`: dropped unread, never retried (the next answer would be as long). */
  tooLarge(): Failure {
    const { host, maxReplyBytes } = this.#context;
    const message = `LLM reply from ${host} is too large: it went past the limit of ${maxReplyBytes} bytes`;
    return this.make("too_large", message, false);
  }

  /** An `LlmError` from parsing becomes an `invalid_response` failure; anything else is a bug, rethrown. */
  invalid(error: unknown): Failure {
    if (!(error instanceof LlmError)) throw error;
    return this.make("invalid_response", error.message, false);
  }

  /** The attempt's outcome for a whole (non-streamed) body: the reply, or why it is not one. */
  parse(text: string): Attempt {
    const { host, model } = this.#context;
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      const error = invalidResponseError(`body is not JSON: ${quoteBody(text)}`, host);
      return { ok: false, failure: this.make("invalid_response", error.message, false) };
    }
    try {
      return { ok: true, reply: parseCompletion(json, { model, source: host }) };
    } catch (error) {
      return { ok: false, failure: this.invalid(error) };
    }
  }

  /** A non-2xx answer, with the provider's own message when it sent one, and its `Retry-After`. */
  http(response: Response, text: string): Failure {
    const { status } = response;
    let detail: string | null = null;
    try {
      detail = providerErrorMessage(JSON.parse(text));
    } catch {
      // Not JSON (an HTML error page, a proxy's text): quote the text itself below.
    }
    detail = quoteBody(detail ?? text) || response.statusText;
    const said = detail === "" ? "" : `: ${detail}`;
    const message = `LLM request failed: HTTP ${status} from ${this.#context.host}${said}`;
    const retryable = isRetryableStatus(status);
    const failure = this.make("http", message, retryable, status);
    if (retryable) {
      failure.retryAfterMs = parseRetryAfter(response.headers.get("retry-after"), this.#context.now());
    }
    return failure;
  }

  aborted(): Failure {
    return this.make("aborted", "LLM request was aborted", false);
  }

  /** Every failure message passes through here, so the key cannot leak from any provider or fetch text. */
  make(kind: LlmErrorKind, message: string, retryable: boolean, status: number | null = null): Failure {
    const { apiKey } = this.#context;
    const redacted = apiKey === "" ? message : message.replaceAll(apiKey, "[redacted]");
    return { kind, message: redacted, status, retryable, retryAfterMs: null };
  }

  /** The error `chat` rejects with after its last attempt. */
  final(failure: Failure, retries: number): LlmError {
    const attempts = retries > 0 ? ` (${retries + 1} attempts)` : "";
    return new LlmError(`${failure.message}${attempts}`, {
      kind: failure.kind,
      status: failure.status,
      retries,
    });
  }
}
