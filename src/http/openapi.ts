/**
 * The OpenAPI 3.1 description of the HTTP API, served at `/openapi.json`. A test checks that every route
 * the router serves is described here, with its method.
 * @module
 */
import { RUN_EVENT_NAMES } from "../types.ts";

const error = {
  type: "object",
  required: ["error"],
  properties: {
    error: {
      type: "object",
      required: ["code", "message"],
      properties: {
        code: { type: "string" },
        message: { type: "string" },
        run_id: { type: "string", description: "present on 502/504: find the run in the trace" },
      },
    },
  },
};

const errors = (...statuses: number[]) =>
  Object.fromEntries(
    statuses.map((status) => [
      String(status),
      {
        description: DESCRIPTIONS[status],
        content: { "application/json": { schema: { $ref: "#/components/schemas/Error" } } },
      },
    ]),
  );

const DESCRIPTIONS: Record<number, string> = {
  400: "malformed JSON, missing or non-string message, invalid session id, or a bad trace limit or cursor",
  401: "missing or unknown bearer token",
  404: "unknown route, or the caller has no session of that id (session ids are per user)",
  405: "method not allowed on this path",
  409: "retry with nothing to retry: the session's last turn was answered",
  413: "body over AGENT_MAX_BODY_BYTES",
  415: "body is not application/json",
  429: "the session already has 8 turns waiting; see Retry-After",
  502: "the model failed (the body carries the run_id)",
  503: "the server is shutting down",
  504: "the model timed out (the body carries the run_id)",
};

const json = (schema: unknown, description = "OK") => ({
  description,
  content: { "application/json": { schema } },
});

const sessionId = {
  name: "id",
  in: "path",
  required: true,
  description: "1-128 characters of A-Z a-z 0-9 . _ : -",
  schema: { type: "string", pattern: "^[A-Za-z0-9._:-]{1,128}$" },
};

interface Operation {
  summary: string;
  security?: unknown[];
  responses: Record<string, { description: string }>;
  [key: string]: unknown;
}
type PathItem = { get?: Operation; [key: string]: unknown };

/** Adds to every path with a GET its HEAD: the same statuses and headers, never a body. */
function withHead(paths: Record<string, PathItem>): Record<string, PathItem> {
  return Object.fromEntries(
    Object.entries(paths).map(([path, item]) => {
      if (item.get === undefined) return [path, item];
      const responses = Object.fromEntries(
        Object.entries(item.get.responses).map(([status, { description }]) => [status, { description }]),
      );
      const security = item.get.security === undefined ? {} : { security: item.get.security };
      return [path, { ...item, head: { summary: "Same as GET, without the body", ...security, responses } }];
    }),
  );
}

/** The document. */
export const OPENAPI = {
  openapi: "3.1.0",
  info: {
    title: "mini-runtime-agent",
    version: "1.0.0",
    description:
      'Sessions API over one bounded tool-calling loop. Errors are {"error": {"code", "message"}}.',
  },
  components: {
    securitySchemes: { bearer: { type: "http", scheme: "bearer" } },
    schemas: {
      Error: error,
      Turn: {
        type: "object",
        required: ["session_id", "run_id", "turn", "outcome", "answer", "tool_calls", "usage"],
        properties: {
          session_id: { type: "string" },
          run_id: { type: "string" },
          turn: { type: "integer" },
          outcome: { enum: ["answered", "max_steps", "empty", "aborted", "error"] },
          answer: { type: "string" },
          tool_calls: {
            type: "array",
            items: {
              type: "object",
              properties: {
                name: { type: "string" },
                arguments: { type: "string" },
                ok: { type: "boolean" },
              },
            },
          },
          usage: {
            type: "object",
            properties: {
              prompt_tokens: { type: ["integer", "null"] },
              completion_tokens: { type: ["integer", "null"] },
              total_tokens: { type: ["integer", "null"] },
            },
          },
        },
      },
      RunEvent: {
        type: "object",
        required: ["ts", "session_id", "run_id", "turn", "event", "step", "data"],
        properties: {
          ts: { type: "string" },
          session_id: { type: "string" },
          user_id: {
            type: "string",
            description: "the user the session belongs to (absent on lines written before events carried it)",
          },
          run_id: { type: "string" },
          turn: { type: "integer" },
          event: { enum: RUN_EVENT_NAMES },
          step: { type: ["integer", "null"] },
          data: { type: "object" },
        },
      },
    },
  },
  security: [{ bearer: [] }],
  paths: withHead({
    "/healthz": {
      get: {
        summary: "Liveness and database check (no auth, no secrets)",
        security: [],
        responses: {
          "200": json({
            type: "object",
            properties: { ok: { type: "boolean" }, model: { type: "string" }, db: { type: "string" } },
          }),
          ...errors(503),
        },
      },
    },
    "/openapi.json": {
      get: { summary: "This document", security: [], responses: { "200": json({ type: "object" }) } },
    },
    "/v1/sessions": {
      get: {
        summary: "The caller's sessions, newest first",
        responses: {
          "200": json({
            type: "object",
            properties: {
              sessions: {
                type: "array",
                items: {
                  type: "object",
                  properties: {
                    id: { type: "string" },
                    turn_count: { type: "integer" },
                    updated_at: { type: "string" },
                  },
                },
              },
            },
          }),
          ...errors(401),
        },
      },
    },
    "/v1/sessions/{id}": {
      parameters: [sessionId],
      get: {
        summary: "Turn count, summary and messages of one session",
        responses: { "200": json({ type: "object" }), ...errors(400, 401, 404) },
      },
      delete: {
        summary: "Delete the session's messages, todos and summary; its trace route is 404 from then on, " +
          "while its lines stay in the append-only trace file until rotation deletes them",
        responses: { "204": { description: "deleted" }, ...errors(400, 401, 404) },
      },
    },
    "/v1/sessions/{id}/messages": {
      parameters: [sessionId],
      post: {
        summary: "Run one user turn; with Accept: text/event-stream, stream its run events as SSE",
        requestBody: {
          required: true,
          content: {
            "application/json": {
              schema: { type: "object", required: ["message"], properties: { message: { type: "string" } } },
            },
          },
        },
        responses: {
          "200": {
            description: "The turn's result, or an SSE stream of run events (one `event:` per RunEvent)",
            content: {
              "application/json": { schema: { $ref: "#/components/schemas/Turn" } },
              "text/event-stream": { schema: { type: "string" } },
            },
          },
          ...errors(400, 401, 404, 413, 415, 429, 502, 503, 504),
        },
      },
    },
    "/v1/sessions/{id}/retry": {
      parameters: [sessionId],
      post: {
        summary:
          "Rerun the session's last unanswered message (after a turn ended in error) without sending it again; " +
          "answered like a turn, JSON or SSE",
        responses: {
          "200": {
            description: "The retried turn's result (same turn number), or an SSE stream of its run events",
            content: {
              "application/json": { schema: { $ref: "#/components/schemas/Turn" } },
              "text/event-stream": { schema: { type: "string" } },
            },
          },
          ...errors(400, 401, 404, 409, 429, 502, 503, 504),
        },
      },
    },
    "/v1/sessions/{id}/todos": {
      parameters: [sessionId],
      get: {
        summary: "The session's todos",
        responses: { "200": json({ type: "object" }), ...errors(400, 401, 404) },
      },
    },
    "/v1/sessions/{id}/trace": {
      parameters: [
        sessionId,
        { name: "run_id", in: "query", required: false, schema: { type: "string" } },
        {
          name: "limit",
          in: "query",
          required: false,
          description: "events per page",
          schema: { type: "integer", minimum: 1, maximum: 1000, default: 200 },
        },
        {
          name: "cursor",
          in: "query",
          required: false,
          description: "the next_cursor of the previous page (opaque)",
          schema: { type: "string" },
        },
      ],
      get: {
        summary: "The session's trace events, oldest first, a page at a time (optionally of one run)",
        responses: {
          "200": json({
            type: "object",
            required: ["session_id", "events", "next_cursor"],
            properties: {
              session_id: { type: "string" },
              events: { type: "array", items: { $ref: "#/components/schemas/RunEvent" } },
              next_cursor: {
                type: ["string", "null"],
                description: "pass as cursor for the next page; null on the last page",
              },
            },
          }),
          ...errors(400, 401, 404),
        },
      },
    },
  }),
} as const;
