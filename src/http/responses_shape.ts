/**
 * The Responses API's wire shapes as `POST /v1/responses` writes them: the `response` object, its assistant
 * `message` item, usage, and the stream's events (`response.created` … `response.completed`), each numbered.
 * Pure.
 * @module
 */
import type { TurnOutcome, Usage } from "../types.ts";
import type { HttpError } from "./errors.ts";
import { AGENT_MODEL } from "./openai_shape.ts";

/** What a response echoes of its request, and its ids. */
export interface ResponseEcho {
  /** `resp_<run id>`, so the trace finds the run. */
  id: string;
  /** Unix seconds. */
  createdAt: number;
  previousResponseId: string | null;
  /** The request's `instructions`, or null. */
  instructions: string | null;
  /** The request's `text.format` (`{"type": "text"}` by default). */
  textFormat: Record<string, unknown>;
  store: boolean;
  metadata: Record<string, unknown>;
}

/** A response's state: in progress (no output yet), or ended. */
export interface ResponseState {
  status: "in_progress" | "completed" | "incomplete" | "failed";
  output: Record<string, unknown>[];
  usage: Usage | null;
  /** Why it is `incomplete`. @default {null} */
  incompleteReason?: string | null;
  /** Why it `failed`. @default {null} */
  error?: { code: string; message: string } | null;
  /** Fields beside OpenAI's (`awaiting_approval`). @default {{}} */
  extra?: Record<string, unknown>;
}

/**
 * The `status` of a turn that ended with an answer: `incomplete` (reason `max_output_tokens`, the only
 * reason OpenAI has for a limit) when it reached its step limit or its token budget, `completed` otherwise.
 */
export function responseStatus(outcome: TurnOutcome): "completed" | "incomplete" {
  return outcome === "max_steps" || outcome === "budget" ? "incomplete" : "completed";
}

/** Usage as the Responses API writes it: summed over the turn's model calls; 0 for a count never reported. */
export function responseUsage(usage: Usage): Record<string, unknown> {
  const input = usage.promptTokens ?? 0;
  const output = usage.completionTokens ?? 0;
  return {
    input_tokens: input,
    input_tokens_details: { cached_tokens: usage.cachedTokens ?? 0 },
    output_tokens: output,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: usage.totalTokens ?? input + output,
  };
}

/** The `response` object: OpenAI's fields, those the agent does not use at their neutral values. */
export function responseBody(echo: ResponseEcho, state: ResponseState): Record<string, unknown> {
  const { status, output, usage, incompleteReason = null, error = null, extra = {} } = state;
  return {
    id: echo.id,
    object: "response",
    access_programs: null,
    created_at: echo.createdAt,
    status,
    background: false,
    error,
    incomplete_details: incompleteReason === null ? null : { reason: incompleteReason },
    instructions: echo.instructions,
    max_output_tokens: null,
    metadata: echo.metadata,
    model: AGENT_MODEL,
    output,
    parallel_tool_calls: false,
    previous_response_id: echo.previousResponseId,
    reasoning: null,
    store: echo.store,
    temperature: null,
    text: { format: echo.textFormat },
    tool_choice: "auto",
    tools: [],
    top_p: null,
    truncation: "disabled",
    usage: usage === null ? null : responseUsage(usage),
    ...extra,
  };
}

/** The `output_text` part of a message saying `text`. */
export function textPart(text: string): Record<string, unknown> {
  return { type: "output_text", text, annotations: [], logprobs: [] };
}

/** The assistant's `message` item `id`: its text as one `output_text` part (none while in progress). */
export function messageItem(
  id: string,
  text: string | null,
  status: "in_progress" | "completed" | "incomplete",
): Record<string, unknown> {
  return { id, type: "message", status, role: "assistant", content: text === null ? [] : [textPart(text)] };
}

/** The `server_label` of the items that show the agent's own tool calls. */
export const TOOLS_LABEL = "mini-agent";

/**
 * A tool call the agent ran on the server (item `id`: `mcp_<run id>_<n>`, the run's n-th from 1), as the
 * item OpenAI has for a call a server made: `mcp_call`, with
 * the tool's result as its `output` (its error as `error`). Clients take it as done already (the AI SDK as a
 * provider-executed call with its result) and never run it themselves, as a `function_call` would ask them to.
 */
export function toolCallItem(
  id: string,
  call: { name: string; arguments: string },
  result: { ok: boolean; data: unknown; error: unknown },
): Record<string, unknown> {
  return {
    id,
    type: "mcp_call",
    status: "completed",
    server_label: TOOLS_LABEL,
    name: call.name,
    arguments: call.arguments,
    output: result.ok ? JSON.stringify(result.data) : null,
    error: result.ok ? null : String(result.error),
  };
}

/**
 * Writes a stream's events, each `{type, sequence_number, …}` with `sequence_number` counted from 0, to
 * `send` (the SSE frame named after its type).
 */
export function responseEvents(send: (data: string, event: string) => void) {
  let sequence = 0;
  return (type: string, data: Record<string, unknown>) =>
    send(JSON.stringify({ type, sequence_number: sequence++, ...data }), type);
}

/** The stream's `error` event of `error`: its code, message and parameter, the run id and `turn_kept` beside. */
export function errorEvent(error: HttpError): Record<string, unknown> {
  const { param = null, ...details } = error.details as { param?: string | null };
  return { code: error.code, message: error.message, param, status: error.status, ...details };
}
