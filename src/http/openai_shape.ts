/**
 * The OpenAI-compatible routes' wire shapes: the `mini-agent` model object, `chat.completion` and
 * `chat.completion.chunk` bodies, usage, finish reasons and errors as OpenAI writes them. Pure.
 * @module
 */
import type { TurnOutcome, Usage } from "../types.ts";
import { HttpError } from "./errors.ts";

/** The one model these routes serve: the agent, its tools run server-side. */
export const AGENT_MODEL = "mini-agent";

/** `created` of the model object: a fixed time (2026-01-01), so the listing never changes. */
const MODEL_CREATED = 1767225600;

/** The model object of `GET /v1/models/mini-agent`. */
export function modelObject(): Record<string, unknown> {
  return { id: AGENT_MODEL, object: "model", created: MODEL_CREATED, owned_by: "mini-runtime-agent" };
}

/** The list of `GET /v1/models`: the agent alone. */
export function modelList(): Record<string, unknown> {
  return { object: "list", data: [modelObject()] };
}

/** The 404 for a model other than the agent, in OpenAI's words. */
export function modelNotFound(model: string, param: string | null): HttpError {
  const message = `The model \`${model}\` does not exist or you do not have access to it.`;
  return requestError(404, "model_not_found", message, param);
}

/** What every body and chunk of one completion shares. */
export interface CompletionIds {
  /** `chatcmpl-<run id>`, so the trace finds the run. */
  id: string;
  /** Unix seconds. */
  created: number;
}

/** Usage as OpenAI writes it: whole numbers summed over the turn's model calls; 0 for a count never reported. */
function usageBody(usage: Usage) {
  return {
    prompt_tokens: usage.promptTokens ?? 0,
    completion_tokens: usage.completionTokens ?? 0,
    total_tokens: usage.totalTokens ?? 0,
  };
}

/**
 * The `finish_reason` of a turn that ended with an answer: `length` when it reached its step limit or its token
 * budget (the answer is the runtime's note that it stopped short), `stop` otherwise.
 */
export function finishReason(outcome: TurnOutcome): "stop" | "length" {
  return outcome === "max_steps" || outcome === "budget" ? "length" : "stop";
}

/** A whole `chat.completion` with `answer` as the assistant message. */
export function completionBody(
  ids: CompletionIds,
  answer: string,
  finish: "stop" | "length",
  usage: Usage,
): Record<string, unknown> {
  const message = { role: "assistant", content: answer, refusal: null };
  return {
    ...envelope(ids, "chat.completion"),
    choices: [{ index: 0, message, logprobs: null, finish_reason: finish }],
    usage: usageBody(usage),
  };
}

/**
 * One `chat.completion.chunk` with a delta (or an empty one with the `finish`); with `withUsage` it has
 * `usage: null`, as every chunk has when the client asked for the usage chunk.
 */
export function chunkBody(
  ids: CompletionIds,
  delta: Record<string, unknown>,
  finish: "stop" | "length" | null,
  withUsage: boolean,
): Record<string, unknown> {
  return {
    ...envelope(ids, "chat.completion.chunk"),
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
    ...(withUsage ? { usage: null } : {}),
  };
}

/** The last chunk when the client asked for usage: no choices, the turn's usage. */
export function usageChunk(ids: CompletionIds, usage: Usage): Record<string, unknown> {
  return { ...envelope(ids, "chat.completion.chunk"), choices: [], usage: usageBody(usage) };
}

function envelope(ids: CompletionIds, object: string) {
  return { id: ids.id, object, created: ids.created, model: AGENT_MODEL };
}

/** An error of these routes naming the request parameter at fault (`messages[2].content`), or null. */
export function requestError(status: number, code: string, message: string, param: string | null): HttpError {
  return new HttpError(status, code, message, { details: { param } });
}

/**
 * OpenAI's `{"error": {"message", "type", "param", "code"}}` for `error`. `type` is `invalid_request_error`
 * for a 4xx (401 with code `invalid_api_key`, 429 with `rate_limit_exceeded`, as OpenAI writes them, but
 * `quota_exceeded` for the daily token quota, which no retry within the day gets past) and
 * `server_error` for a 5xx; `param` comes from a {@linkcode requestError}; a `run_id` stays alongside.
 */
export function openaiErrorBody(error: HttpError): { error: Record<string, unknown> } {
  const { param = null, ...details } = error.details as { param?: string | null };
  const code = error.status === 401
    ? "invalid_api_key"
    : error.status === 429 && error.code !== "quota_exceeded"
    ? "rate_limit_exceeded"
    : error.code;
  const type = error.status >= 500 ? "server_error" : "invalid_request_error";
  return { error: { message: error.message, type, param, code, ...details } };
}

/** `error` as a response in OpenAI's shape, with the error's status and headers (`Retry-After`, …). */
export function openaiErrorResponse(error: HttpError): Response {
  return error.response(openaiErrorBody(error));
}
