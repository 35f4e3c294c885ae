/**
 * The OpenAPI 3.1 description of the HTTP API, served at `/openapi.json`. A test checks that every route
 * the router serves is described here, with its method.
 * @module
 */
import { RUN_EVENT_NAMES } from "../events.ts";

const str = { type: "string" };
const int = { type: "integer" };
const intOrNull = { type: ["integer", "null"] };
const bool = { type: "boolean" };
const anyObject = { type: "object" };
const array = (items: unknown) => ({ type: "array", items });
const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });

function object(properties: Record<string, unknown>, required?: string[]) {
  return required === undefined ? { type: "object", properties } : { type: "object", required, properties };
}

function json(schema: unknown, description = "OK") {
  return { description, content: { "application/json": { schema } } };
}

const DESCRIPTIONS: Record<number, string> = {
  400:
    "malformed JSON, missing or non-string message, a title that is not a string or is over 80 characters, a response_format the runtime cannot use, invalid " +
    "session or run id, a bad trace limit or cursor, a Last-Event-ID that is not an event id, or decisions " +
    "that do not name exactly the waiting calls with approve or deny",
  401: "missing or unknown bearer token",
  403: "without tokens, a Host that is not loopback on the listening port nor in AGENT_ALLOWED_HOSTS " +
    "(host_not_allowed); a POST, PATCH or DELETE whose Origin is another site's page (origin_not_allowed)",
  404: "unknown route, or the caller has no session of that id (session ids are per user); a run with no " +
    "events (run_not_found); an MCP session id unknown or of another user, or /mcp without AGENT_SERVE_MCP",
  405: "method not allowed on this path",
  406: "MCP: the Accept header lacks application/json or text/event-stream",
  409:
    "retry with nothing to retry (the session's last turn was answered); a message or retry while a turn " +
    "waits for approval (approval_pending); decisions when no turn waits (no_pending_approval); a cancel " +
    "when no turn runs (no_running_turn); a turn cancelled meanwhile (turn_cancelled)",
  413: "body over AGENT_MAX_BODY_BYTES",
  415: "body is not application/json",
  429: "the session already has 8 turns waiting (too_many_requests), or the user spent its " +
    "AGENT_USER_DAILY_TOKENS of the UTC day (quota_exceeded, Retry-After at 00:00 UTC)",
  502: "the model failed (llm_error), or its answer did not match response_format even after a repair " +
    "request (invalid_output, with the errors; the answer is stored); the body carries the run_id",
  503:
    "the server is shutting down (a running turn too, once the grace period ends), runs or queues turns of " +
    "1,024 other sessions, lost the session's lease mid-turn (session_lease_lost), or the session database " +
    "went away (store_unavailable); see Retry-After",
  504: "the model timed out (llm_timeout; its question stays for retry), or the whole turn passed " +
    "AGENT_TURN_TIMEOUT_SECONDS (turn_timeout; nothing of it was kept); the body carries the run_id",
};

/** The error responses of `statuses`, and the 403 of the host and origin rules, which every route has. */
function errors(statuses: number[], schema = "Error", described = DESCRIPTIONS) {
  const all = [...new Set([...statuses, 403])].sort();
  return Object.fromEntries(all.map((status) => [status, json(ref(schema), described[status])]));
}

/** An operation: `summary`, then `extra` (security, request body), then a 200 of `ok` and the errors. */
function op(summary: string, ok: unknown, statuses: number[], extra = {}, errorsOf = errors): Operation {
  return { summary, ...extra, responses: { "200": ok, ...errorsOf(statuses) } } as Operation;
}

/** A turn's answer: JSON, or an SSE stream of its run events (each with its id, the run's in X-Run-Id). */
function turn(description: string) {
  const content = { "application/json": { schema: ref("Turn") }, "text/event-stream": { schema: str } };
  const headers = {
    "X-Run-Id": {
      description: "SSE: the run's id, to follow it again at …/runs/{run_id}/events",
      schema: str,
    },
    "Preference-Applied": { description: "resumable, when the request's Prefer asked for it", schema: str },
  };
  return { description, headers, content };
}

/** `Prefer: resumable` on an SSE turn: a disconnect does not cancel it. */
const preferHeader = param(
  "Prefer",
  "header",
  str,
  "resumable (with Accept: text/event-stream): the turn outlives the connection; follow it again " +
    "at GET /v1/sessions/{id}/runs/{run_id}/events, stop it with POST /v1/sessions/{id}/cancel",
);

function param(name: string, where: "path" | "query" | "header", schema: unknown, description?: string) {
  return { name, in: where, required: where === "path", ...(description && { description }), schema };
}

const idSchema = { ...str, pattern: "^[A-Za-z0-9._:-]{1,128}$" };
const id = param("id", "path", idSchema, "1-128 characters of A-Z a-z 0-9 . _ : -");

/** The statuses of the OpenAI-compatible routes, with a body in OpenAI's error shape. */
function openaiErrors(statuses: number[]) {
  return errors(statuses, "OpenAIError", {
    ...DESCRIPTIONS,
    400: "invalid JSON or parameters (`param` names which), a last message that is not a user message, " +
      "client tools, a response_format the runtime cannot use, an invalid session id, or a malformed " +
      "Idempotency-Key (invalid_idempotency_key)",
    404: "a model other than mini-agent (`model_not_found`)",
    409: "a request of the same Idempotency-Key still runs (idempotency_key_in_use, Retry-After: 1)",
    422: "the Idempotency-Key was used within 24 h for another body (idempotency_key_reused), or its " +
      "result was over 1 MiB and not kept (idempotency_result_too_large)",
  });
}

const sessionHeader = param(
  "X-Session-Id",
  "header",
  idSchema,
  "keep the conversation in this session of the caller's: only the last message is new. " +
    "Without it (or metadata.session_id) the request's messages are the whole history and nothing is stored.",
);

const idempotencyHeader = param(
  "Idempotency-Key",
  "header",
  { ...str, pattern: "^[\\x21-\\x7e]{1,255}$" },
  "run the request once: a repeat of the same key and body within 24 h gets the first one's response " +
    "(a stream's text at once), with idempotent-replayed: true, without running the turn again; per user",
);

type Operation = {
  summary: string;
  security?: unknown[];
  responses: Record<string, { description: string }>;
};
type PathItem = { get?: Operation; [key: string]: unknown };

/** Adds to every path with a GET its HEAD: the same statuses and headers, never a body. */
function withHead(paths: Record<string, PathItem>): Record<string, PathItem> {
  for (const item of Object.values(paths)) {
    if (item.get === undefined) continue;
    const { security, responses } = item.get;
    const head = Object.entries(responses).map(([status, { description }]) => [status, { description }]);
    const summary = "Same as GET, without the body";
    item.head = { summary, ...(security && { security }), responses: Object.fromEntries(head) };
  }
  return paths;
}

const noAuth = { security: [] };
const html = { description: "OK", content: { "text/html": { schema: str } } };
const messageBody = object({ message: str, response_format: ref("ResponseFormat") }, ["message"]);
const approvalCall = object({ id: str, name: str, arguments: str }, ["id", "name", "arguments"]);
const decisionsBody = object({
  decisions: {
    type: "object",
    additionalProperties: { enum: ["approve", "deny"] },
    description: "every waiting call's id, mapped to approve or deny",
  },
}, ["decisions"]);
const health = object({ ok: bool, model: str, db: str });
const sessionTitle = {
  type: ["string", "null"],
  description: "given by its user, else the first line of its first question (at most 80 characters); " +
    "null before its first question",
};
const sessionList = object({
  sessions: array(object({ id: str, title: sessionTitle, turn_count: int, updated_at: str })),
});
const renameBody = object({
  title: {
    ...str,
    description: "trimmed, spaces collapsed, at most 80 characters; blank names the session from its first " +
      "question again",
  },
}, ["title"]);
const costUsd = {
  type: ["number", "null"],
  description: "with AGENT_PRICES only: dollars; null when a model has no price",
};
const cachedTokens = {
  ...int,
  description: "of prompt_tokens, those the provider read from its prompt cache (0 when it did not say)",
};
const cacheWriteTokens = {
  ...int,
  description: "of prompt_tokens, those the provider wrote to its prompt cache (0 when it did not say)",
};
const usageRow = object({
  model: str,
  prompt_tokens: int,
  cached_tokens: cachedTokens,
  cache_write_tokens: cacheWriteTokens,
  completion_tokens: int,
  total_tokens: int,
  calls: int,
  estimated_calls: { ...int, description: "calls whose provider reported no counts: estimated" },
  cost_usd: costUsd,
});
const dayTotals = {
  day: str,
  total_tokens: int,
  cached_tokens: cachedTokens,
  cache_write_tokens: cacheWriteTokens,
  cost_usd: costUsd,
};
const usagePage = object({
  user_id: str,
  from: str,
  to: str,
  days: array(object({ ...dayTotals, models: array(usageRow) })),
  today: object({
    ...dayTotals,
    daily_tokens: { ...intOrNull, description: "AGENT_USER_DAILY_TOKENS, null without a quota" },
    left: intOrNull,
  }),
});
const memoryItem = object({
  id: int,
  text: str,
  source_session: { type: ["string", "null"], description: "the session that first wrote it" },
  first_seen: str,
  last_seen: str,
  last_used: { ...str, description: "last written or recalled: the least recently used item leaves first" },
  use_count: { ...int, description: "turns that recalled it" },
});
const tracePage = object({
  session_id: str,
  events: array(ref("RunEvent")),
  next_cursor: {
    type: ["string", "null"],
    description: "pass as cursor for the next page; null on the last page",
  },
}, ["session_id", "events", "next_cursor"]);

/** The document. */
export const OPENAPI = {
  openapi: "3.1.0",
  info: {
    title: "mini-runtime-agent",
    version: "1.0.0",
    description:
      'Sessions API over one bounded tool-calling loop. Errors are {"error": {"code", "message"}}, except on ' +
      "the OpenAI-compatible routes (/v1/chat/completions, /v1/responses, /v1/models), which use OpenAI's " +
      '{"error": {"message", "type", "param", "code"}}.',
  },
  components: {
    securitySchemes: { bearer: { type: "http", scheme: "bearer" } },
    schemas: {
      Error: object({
        error: object({
          code: str,
          message: str,
          run_id: { ...str, description: "present on 502/504: find the run in the trace" },
          errors: {
            ...array(str),
            description:
              "with invalid_output: what is wrong with the answer, each as `path: what was expected`",
          },
        }, ["code", "message"]),
      }, ["error"]),
      Turn: object({
        session_id: str,
        run_id: str,
        turn: int,
        // A turn that ends "error", "aborted", "timeout" or "invalid_output" is answered with its error status
        // instead (failedTurn()).
        outcome: { enum: ["answered", "max_steps", "budget", "empty", "awaiting_approval"] },
        answer: str,
        tool_calls: array(object({ name: str, arguments: str, ok: bool })),
        usage: object({ prompt_tokens: intOrNull, completion_tokens: intOrNull, total_tokens: intOrNull }),
        approval: {
          ...object({ calls: array(approvalCall) }, ["calls"]),
          description: "with awaiting_approval: the calls waiting for POST /v1/sessions/{id}/approvals",
        },
      }, ["session_id", "run_id", "turn", "outcome", "answer", "tool_calls", "usage"]),
      OpenAIError: object({
        error: object({
          message: str,
          type: { enum: ["invalid_request_error", "server_error"] },
          param: { type: ["string", "null"], description: "the request parameter at fault" },
          code: str,
        }, ["message", "type", "param", "code"]),
      }, ["error"]),
      ChatCompletionRequest: {
        ...object({
          model: { const: "mini-agent" },
          messages: array(object({
            role: { enum: ["system", "developer", "user", "assistant"] },
            content: {
              anyOf: [str, array(object({ type: { const: "text" }, text: str }, ["type", "text"]))],
            },
          }, ["role", "content"])),
          stream: bool,
          stream_options: object({ include_usage: bool }),
          response_format: ref("ResponseFormat"),
          metadata: object({ session_id: { ...idSchema, description: "like the X-Session-Id header" } }),
        }, ["model", "messages"]),
        description:
          "The last message must be a user message: the turn's question. tools, functions and tool " +
          "messages are rejected (the agent runs its own tools); n must be 1; sampling parameters are ignored.",
      },
      ResponsesRequest: {
        ...object({
          model: { const: "mini-agent" },
          input: {
            anyOf: [
              str,
              array(object({
                type: { const: "message" },
                role: { enum: ["system", "developer", "user", "assistant"] },
                content: {
                  anyOf: [
                    str,
                    array(
                      object({ type: { enum: ["input_text", "output_text"] }, text: str }, ["type", "text"]),
                    ),
                  ],
                },
              }, ["role", "content"])),
            ],
          },
          instructions: str,
          previous_response_id: {
            ...idSchema,
            description: "continue the session this response was made on",
          },
          stream: bool,
          store: { ...bool, default: true },
          text: object({ format: anyObject }),
          metadata: object({ session_id: { ...idSchema, description: "like the X-Session-Id header" } }),
        }, ["model", "input"]),
        description:
          "The last input item must be a user message: the turn's question. text.format is OpenAI's " +
          "(json_schema with name, schema, strict beside type; json_object; text) and maps to ResponseFormat. " +
          "An item_reference to a kept response's message is read as it, to its mcp_call items passed over. " +
          "Other item types (function_call_output, …), input_image parts and client tools are " +
          "rejected (the agent runs its own tools; images are not supported yet); sampling parameters are ignored.",
      },
      ResponseFormat: {
        anyOf: [
          object({ type: { enum: ["text", "json_object"] } }, ["type"]),
          object({
            type: { const: "json_schema" },
            json_schema: object({
              name: { ...str, pattern: "^[A-Za-z0-9_-]{1,64}$", default: "response" },
              description: str,
              schema: anyObject,
              strict: { type: ["boolean", "null"] },
            }, ["schema"]),
          }, ["type", "json_schema"]),
        ],
        description: "What the final answer must be: it is passed to the model (or, with " +
          "AGENT_RESPONSE_FORMAT=prompt, written into its system message) and checked by the runtime's JSON " +
          "Schema validator; an invalid answer gets one repair request, then the turn ends invalid_output " +
          "(502). The validator checks type, properties, required, additionalProperties, enum, const, " +
          "minLength, maxLength, pattern, minimum, maximum, exclusiveMinimum, exclusiveMaximum, items, " +
          "minItems, maxItems, anyOf, oneOf, allOf and local $refs; other keywords are accepted and ignored. " +
          "json_object wants one JSON object; text is the default. Such an answer is not streamed in pieces.",
      },
      Model: object({ id: str, object: { const: "model" }, created: int, owned_by: str }),
      RunEvent: object({
        ts: str,
        session_id: str,
        user_id: {
          ...str,
          description: "the user the session belongs to (absent on lines written before events carried it)",
        },
        run_id: str,
        turn: int,
        event: { enum: RUN_EVENT_NAMES },
        step: intOrNull,
        data: anyObject,
      }, ["ts", "session_id", "run_id", "turn", "event", "step", "data"]),
    },
  },
  security: [{ bearer: [] }],
  paths: withHead({
    "/healthz": {
      get: op("Liveness and database check (no auth, no secrets)", json(health), [503], noAuth),
    },
    "/openapi.json": { get: op("This document", json(anyObject), [], noAuth) },
    "/": { get: op("The web page (chat, sessions, run timelines)", html, [], noAuth) },
    "/web/{file}": {
      parameters: [param("file", "path", str, "one of the page's scripts or its stylesheet")],
      get: op("A file of the web page", { description: "the file" }, [404], noAuth),
    },
    "/text/{file}": {
      parameters: [
        param("file", "path", str, "a text rule the page shares with the server: markdown.js, title.js"),
      ],
      get: op("A module of the page's text rules", { description: "the file" }, [404], noAuth),
    },
    "/v1/sessions": { get: op("The caller's sessions, newest first", json(sessionList), [401]) },
    "/v1/sessions/{id}": {
      parameters: [id],
      get: op(
        "Title, turn count, summary, messages and pending_approval (the calls a paused turn waits for, or " +
          "null) of one session",
        json(anyObject),
        [400, 401, 404],
      ),
      patch: op(
        "Rename the session; the title is kept over later messages",
        json(object({ session_id: str, title: sessionTitle })),
        [400, 401, 404, 413, 415],
        { requestBody: { required: true, content: { "application/json": { schema: renameBody } } } },
      ),
      delete: {
        summary: "Delete the session's messages, todos and summary; its trace route is 404 from then on, " +
          "while its lines stay in the append-only trace file until rotation deletes them",
        responses: { "204": { description: "deleted" }, ...errors([400, 401, 404]) },
      },
    },
    "/v1/sessions/{id}/messages": {
      parameters: [id, preferHeader],
      post: op(
        "Run one user turn; with Accept: text/event-stream, stream its run events as SSE",
        turn("The turn's result, or an SSE stream of run events (one `event:` per RunEvent)"),
        [400, 401, 404, 409, 413, 415, 429, 502, 503, 504],
        { requestBody: { required: true, content: { "application/json": { schema: messageBody } } } },
      ),
    },
    "/v1/sessions/{id}/approvals": {
      parameters: [id, preferHeader],
      post: op(
        "Decide on the calls a turn waits for (outcome awaiting_approval) and resume the same run; a denied " +
          'call gets the tool result "denied by the user". Answered like a turn, JSON or SSE',
        turn("The resumed turn's result (same run and turn), or an SSE stream of its run events"),
        [400, 401, 404, 409, 413, 415, 429, 502, 503, 504],
        { requestBody: { required: true, content: { "application/json": { schema: decisionsBody } } } },
      ),
    },
    "/v1/sessions/{id}/retry": {
      parameters: [id, preferHeader],
      post: op(
        "Rerun the session's last unanswered message (after a turn ended in error) without sending it again; " +
          "answered like a turn, JSON or SSE",
        turn("The retried turn's result (same turn number), or an SSE stream of its run events"),
        [400, 401, 404, 409, 429, 502, 503, 504],
      ),
    },
    "/v1/sessions/{id}/cancel": {
      parameters: [id, param("run_id", "query", idSchema, "cancel only this run")],
      post: {
        summary: "Cancel the session's running turn wherever it runs (taken back as an aborted turn; on " +
          "another replica at its next lease renewal, within a third of AGENT_SESSION_LEASE_SECONDS)",
        responses: {
          "202": json(object({ session_id: str, run_id: str }, ["session_id", "run_id"]), "cancelling"),
          ...errors([400, 401, 404, 409]),
        },
      },
    },
    "/v1/sessions/{id}/runs/{run_id}/events": {
      parameters: [
        id,
        param("run_id", "path", idSchema, "a run of the session (X-Run-Id, or run_id of its events)"),
        param("Last-Event-ID", "header", str, "the id of the last event received"),
        param("last_event_id", "query", str, "as Last-Event-ID, for clients that cannot set it"),
      ],
      get: op(
        "Follow a run as SSE from any replica: its events after Last-Event-ID (all without), then the rest as " +
          "they are stored, up to its run_end; no deltas (the answer event holds the text)",
        {
          description: "an SSE stream of run events, each with its id",
          content: { "text/event-stream": { schema: str } },
        },
        [400, 401, 404],
      ),
    },
    "/v1/sessions/{id}/todos": {
      parameters: [id],
      get: op("The session's todos", json(anyObject), [400, 401, 404]),
    },
    "/v1/sessions/{id}/trace": {
      parameters: [
        id,
        param("run_id", "query", str),
        param("limit", "query", { ...int, minimum: 1, maximum: 1000, default: 200 }, "events per page"),
        param("cursor", "query", str, "the next_cursor of the previous page (opaque)"),
      ],
      get: op(
        "The session's trace events, oldest first, a page at a time (optionally of one run)",
        json(tracePage),
        [400, 401, 404],
      ),
    },
    "/v1/usage": {
      parameters: [
        param("from", "query", str, "first UTC day, YYYY-MM-DD (default: 29 days before to)"),
        param("to", "query", str, "last UTC day, YYYY-MM-DD (default: today)"),
      ],
      get: op(
        "The caller's tokens by UTC day and model, as counted in the database by every replica, and " +
          "today's against the daily quota",
        json(usagePage),
        [400, 401],
      ),
    },
    "/mcp": {
      parameters: [
        param("Mcp-Session-Id", "header", str, "the MCP session, from the initialize response; absent on it"),
      ],
      post: op(
        "MCP (Streamable HTTP, with AGENT_SERVE_MCP=true): a JSON-RPC message to the agent's MCP server " +
          "(tools ask, sessions, session_history; resources session://{id}/summary and /todos), answered as " +
          "JSON or an SSE stream; the session belongs to the token's user",
        { description: "JSON-RPC", content: { "application/json": { schema: anyObject } } },
        [400, 401, 404, 406, 413, 415],
        { requestBody: { required: true, content: { "application/json": { schema: anyObject } } } },
      ),
      get: op(
        "MCP: the session's stream of server messages (SSE)",
        { description: "SSE", content: { "text/event-stream": { schema: str } } },
        [400, 401, 404, 406],
      ),
      delete: op("MCP: ends the session", { description: "OK" }, [400, 401, 404]),
    },
    "/v1/memory": {
      get: op(
        "The caller's memory across sessions (facts and goals compaction kept, and what the remember tool " +
          "stored), oldest first",
        json(object({ user_id: str, items: array(memoryItem) })),
        [401],
      ),
      delete: op(
        "Erase all of the caller's memory; sessions stay",
        json(object({ deleted: int })),
        [401],
      ),
    },
    "/v1/memory/{id}": {
      parameters: [param("id", "path", { ...int, minimum: 1 }, "the item's id (GET /v1/memory lists them)")],
      delete: {
        summary: "Erase one item of the caller's memory; sessions stay",
        responses: { "204": { description: "erased" }, ...errors([400, 401, 404]) },
      },
    },
    "/v1/models": {
      get: {
        summary: "OpenAI-compatible: the models, which is the agent alone (mini-agent)",
        responses: {
          "200": json(object({ object: str, data: array(ref("Model")) })),
          ...openaiErrors([401]),
        },
      },
    },
    "/v1/models/{model}": {
      parameters: [param("model", "path", str)],
      get: op("OpenAI-compatible: one model", json(ref("Model")), [401, 404], {}, openaiErrors),
    },
    "/v1/responses": {
      parameters: [sessionHeader, idempotencyHeader],
      post: op(
        "OpenAI-compatible (the Responses API): one agent turn (the whole tool loop, tools run on the server) " +
          "as a response object, or with stream: true as its events (response.created … response.completed)",
        {
          description:
            "OpenAI's Response: one assistant message item with one output_text part, then an mcp_call item " +
            "(server_label mini-agent, with its output) per tool call the agent ran; status completed, or " +
            "incomplete (incomplete_details.reason max_output_tokens) when the turn reached its step limit or " +
            "token budget; awaiting_approval beside " +
            "when a call waits. Streamed, a turn without an answer ends with an error event and " +
            "response.failed. Kept (store, the default) for GET /v1/responses/{id} and previous_response_id",
          content: { "application/json": { schema: anyObject }, "text/event-stream": { schema: str } },
        },
        [400, 401, 404, 409, 413, 415, 422, 429, 502, 503, 504],
        {
          requestBody: {
            required: true,
            content: { "application/json": { schema: ref("ResponsesRequest") } },
          },
        },
        openaiErrors,
      ),
    },
    "/v1/responses/{id}": {
      parameters: [param("id", "path", str, "the response's id, resp_…")],
      get: op(
        "OpenAI-compatible: a response the caller made with store (the default), as it was answered",
        json(anyObject),
        [401, 404],
        {},
        openaiErrors,
      ),
    },
    "/v1/chat/completions": {
      parameters: [sessionHeader, idempotencyHeader],
      post: op(
        "OpenAI-compatible: one agent turn (the whole tool loop, tools run on the server) as a " +
          "chat.completion, or with stream: true as chat.completion.chunk events ending in data: [DONE]",
        {
          description:
            "OpenAI's CreateChatCompletionResponse; streamed, CreateChatCompletionStreamResponse " +
            'events (a failure mid-stream is a data: {"error": …} frame). finish_reason is stop, or length ' +
            "when the turn reached its step limit or token budget; usage sums the turn's model calls; " +
            "awaiting_approval ({session_id, calls}) beside, on the completion and the finish chunk, when a " +
            "call waits for approval",
          content: { "application/json": { schema: anyObject }, "text/event-stream": { schema: str } },
        },
        [400, 401, 404, 409, 413, 415, 422, 429, 502, 503, 504],
        {
          requestBody: {
            required: true,
            content: { "application/json": { schema: ref("ChatCompletionRequest") } },
          },
        },
        openaiErrors,
      ),
    },
  }),
} as const;
