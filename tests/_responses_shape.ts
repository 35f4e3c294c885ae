/**
 * The shapes `POST /v1/responses` must write, checked against the official `openai` package's types: OpenAI
 * publishes no JSON Schema of the Responses API that the tests could load (the package ships none, and the
 * stored OpenAPI document covers chat completions only), so the required fields are listed here, the lists
 * checked against the package's types when the tests type-check, and the values asserted field by field.
 */
import assert from "node:assert/strict";
import type { OpenAI } from "./_dev_deps.ts";

type Response = OpenAI.Responses.Response;
type StreamEvent = OpenAI.Responses.ResponseStreamEvent;

/** The keys `T` requires. */
type RequiredKeys<T> = { [K in keyof T]-?: Record<never, never> extends Pick<T, K> ? never : K }[keyof T];

/** The response object's required fields; `output_text` is the client's (computed from `output`). */
const RESPONSE_FIELDS = [
  "id",
  "access_programs",
  "created_at",
  "error",
  "incomplete_details",
  "instructions",
  "metadata",
  "model",
  "object",
  "output",
  "parallel_tool_calls",
  "temperature",
  "tool_choice",
  "tools",
  "top_p",
] as const satisfies readonly RequiredKeys<Response>[];

// Fails to type-check when the package's Response requires a field the list above misses.
const _everyField: Exclude<RequiredKeys<Response>, (typeof RESPONSE_FIELDS)[number] | "output_text"> =
  undefined as never;

/** The fields the package's `mcp_call` item (a call a server ran) requires, as the agent's tool calls show. */
const TOOL_CALL_FIELDS = ["id", "arguments", "name", "server_label", "status"] as const satisfies readonly (
  keyof OpenAI.Responses.ResponseOutputItem.McpCall
)[];

// Fails to type-check when the package's mcp_call item requires a field the list above misses.
const _everyToolCallField: Exclude<
  RequiredKeys<OpenAI.Responses.ResponseOutputItem.McpCall>,
  (typeof TOOL_CALL_FIELDS)[number] | "type"
> = undefined as never;

/** Each event the route sends, with the fields the package's type of it requires beside `type`. */
const EVENT_FIELDS = {
  "response.created": ["response", "sequence_number"],
  "response.in_progress": ["response", "sequence_number"],
  "response.output_item.added": ["item", "output_index", "sequence_number"],
  "response.content_part.added": ["content_index", "item_id", "output_index", "part", "sequence_number"],
  "response.output_text.delta": [
    "content_index",
    "delta",
    "item_id",
    "logprobs",
    "output_index",
    "sequence_number",
  ],
  "response.output_text.done": [
    "content_index",
    "item_id",
    "logprobs",
    "output_index",
    "sequence_number",
    "text",
  ],
  "response.content_part.done": ["content_index", "item_id", "output_index", "part", "sequence_number"],
  "response.output_item.done": ["item", "output_index", "sequence_number"],
  "response.completed": ["response", "sequence_number"],
  "response.incomplete": ["response", "sequence_number"],
  "response.failed": ["response", "sequence_number"],
  "error": ["code", "message", "param", "sequence_number"],
} as const satisfies {
  [T in StreamEvent["type"]]?: readonly Exclude<RequiredKeys<Extract<StreamEvent, { type: T }>>, "type">[];
};

const STATUSES = ["completed", "failed", "in_progress", "cancelled", "queued", "incomplete"];

/** Fails unless `value` (as on the wire) is a response object of the shape the package's type describes. */
export function assertResponse(value: unknown): void {
  const body = JSON.parse(JSON.stringify(value)) as Record<string, unknown>;
  for (const field of RESPONSE_FIELDS) assert.ok(field in body, `the response has no "${field}"`);
  assert.match(body.id as string, /^resp_/);
  assert.equal(body.object, "response");
  assert.equal(typeof body.created_at, "number");
  assert.ok(Number.isInteger(body.created_at));
  assert.ok(STATUSES.includes(body.status as string), `status ${body.status}`);
  assert.equal(typeof body.model, "string");
  assert.equal(typeof body.parallel_tool_calls, "boolean");
  assert.ok(Array.isArray(body.tools));
  assert.ok(body.error === null || typeof (body.error as { message: unknown }).message === "string");
  assert.ok(body.incomplete_details === null || typeof body.incomplete_details === "object");
  assert.ok(body.instructions === null || typeof body.instructions === "string");
  assert.ok(typeof body.metadata === "object");
  assert.ok(Array.isArray(body.output));
  for (const item of body.output as Record<string, unknown>[]) assertOutputItem(item);
  if (body.usage !== null && body.usage !== undefined) assertUsage(body.usage as Record<string, unknown>);
  const format = (body.text as { format: { type: string } }).format;
  assert.ok(["text", "json_object", "json_schema"].includes(format.type));
}

function assertUsage(usage: Record<string, unknown>): void {
  for (const field of ["input_tokens", "output_tokens", "total_tokens"]) {
    assert.ok(Number.isInteger(usage[field]), `usage.${field}`);
  }
  assert.ok(Number.isInteger((usage.input_tokens_details as { cached_tokens: unknown }).cached_tokens));
  assert.ok(
    Number.isInteger((usage.output_tokens_details as { reasoning_tokens: unknown }).reasoning_tokens),
  );
}

/**
 * Fails unless `item` is an output item the route writes: the assistant's `message`, or an `mcp_call` of the
 * agent's own tools, done, with its result or its error.
 */
function assertOutputItem(item: Record<string, unknown>): void {
  if (item.type !== "mcp_call") return assertMessageItem(item);
  for (const field of TOOL_CALL_FIELDS) assert.equal(typeof item[field], "string", `mcp_call.${field}`);
  assert.equal(item.server_label, "mini-agent");
  assert.equal(item.status, "completed");
  assert.ok((typeof item.output === "string") !== (typeof item.error === "string"), "an output or an error");
}

/** Fails unless `item` is an assistant `message` item with `output_text` parts. */
function assertMessageItem(item: Record<string, unknown>): void {
  assert.equal(item.type, "message");
  assert.equal(item.role, "assistant");
  assert.equal(typeof item.id, "string");
  assert.ok(["in_progress", "completed", "incomplete"].includes(item.status as string));
  assert.ok(Array.isArray(item.content));
  for (const part of item.content as Record<string, unknown>[]) assertTextPart(part);
}

function assertTextPart(part: Record<string, unknown>): void {
  assert.equal(part.type, "output_text");
  assert.equal(typeof part.text, "string");
  assert.ok(Array.isArray(part.annotations));
}

/** Fails unless `event` is one of the events the route sends, with the fields its type requires. */
export function assertResponseEvent(event: Record<string, unknown>): void {
  const fields = EVENT_FIELDS[event.type as keyof typeof EVENT_FIELDS];
  assert.ok(fields !== undefined, `an event of an unexpected type: ${event.type}`);
  for (const field of fields) assert.ok(field in event, `${event.type} has no "${field}"`);
  assert.ok(Number.isInteger(event.sequence_number));
  if ("response" in event) assertResponse(event.response);
  if ("item" in event) assertOutputItem(event.item as Record<string, unknown>);
  if ("part" in event) assertTextPart(event.part as Record<string, unknown>);
  for (const field of ["output_index", "content_index"]) {
    if (field in event) assert.ok(Number.isInteger(event[field]));
  }
  if (event.type === "error") {
    assert.equal(typeof event.message, "string");
    assert.ok(event.code === null || typeof event.code === "string");
  }
}
