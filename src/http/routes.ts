/**
 * The route table. Every `/v1` route authenticates first and works on the caller's own sessions only: session
 * ids are per user, so another user's session of the same id is simply not the caller's (404, as if unused).
 * @module
 */
import { parseSummary } from "../memory/summary.ts";
import { type Session, validateId } from "../store.ts";
import { TraceReader } from "../trace_reader.ts";
import { HttpError } from "./errors.ts";
import type { HandlerDeps } from "./handler.ts";
import { OPENAPI } from "./openapi.ts";
import type { Route } from "./router.ts";
import { handleTrace } from "./trace_route.ts";
import { handleTurn, queueKey } from "./turn_route.ts";

function notFound(sessionId: string): HttpError {
  return new HttpError(404, "not_found", `Session "${sessionId}" not found`);
}

/** The caller's session or 404; a malformed id is 400. */
function ownSession(deps: HandlerDeps, sessionId: string, userId: string): Session {
  const session = deps.store.get({ userId, sessionId });
  if (session === null) throw notFound(sessionId);
  return session;
}

/** The routes the server serves, in matching order. */
export function createRoutes(deps: HandlerDeps): Route[] {
  const user = (request: Request) => deps.authenticator.authenticate(request);
  const trace = deps.traceReader ?? new TraceReader(deps.tracePath);
  return [
    {
      method: "GET",
      path: "/healthz",
      handle: () => {
        const db = deps.store.ping();
        return Response.json({ ok: db, model: deps.model, db: db ? "ok" : "unavailable" }, {
          status: db ? 200 : 503,
        });
      },
    },
    { method: "GET", path: "/openapi.json", handle: () => Response.json(OPENAPI) },
    {
      method: "GET",
      path: "/v1/sessions",
      handle: (request) => {
        const sessions = deps.store.listSessions(user(request)).map((s) => ({
          id: s.id,
          turn_count: s.turnCount,
          updated_at: s.updatedAt,
        }));
        return Response.json({ sessions });
      },
    },
    {
      method: "GET",
      path: "/v1/sessions/{id}",
      handle: (request, { params }) => {
        const session = ownSession(deps, params.id, user(request));
        const messages = deps.store.messages({ userId: session.userId, sessionId: session.id }).map((m) => ({
          role: m.role,
          content: m.content,
          tool_calls: m.toolCalls ?? null,
          tool_call_id: m.toolCallId ?? null,
          created_at: m.createdAt,
        }));
        return Response.json({
          session_id: session.id,
          turn_count: session.turnCount,
          summary: parseSummary(session.summary),
          created_at: session.createdAt,
          updated_at: session.updatedAt,
          messages,
        });
      },
    },
    {
      method: "DELETE",
      path: "/v1/sessions/{id}",
      handle: async (request, { params }) => {
        const userId = user(request);
        ownSession(deps, params.id, userId);
        const key = { userId, sessionId: params.id };
        // Through the session's queue, so a delete never lands in the middle of a running turn.
        await deps.queue.run(queueKey(key), () => Promise.resolve(deps.store.deleteSession(key)), {
          signal: request.signal,
        });
        return new Response(null, { status: 204 });
      },
    },
    {
      method: "POST",
      path: "/v1/sessions/{id}/messages",
      handle: (request, { params }) => {
        const userId = user(request);
        validateId(params.id);
        return handleTurn(request, params.id, userId, deps);
      },
    },
    {
      method: "POST",
      path: "/v1/sessions/{id}/retry",
      handle: (request, { params }) => {
        const userId = user(request);
        ownSession(deps, params.id, userId);
        return handleTurn(request, params.id, userId, deps, { retry: true });
      },
    },
    {
      method: "GET",
      path: "/v1/sessions/{id}/todos",
      handle: (request, { params }) => {
        const session = ownSession(deps, params.id, user(request));
        const todos = deps.store.listTodos({ userId: session.userId, sessionId: session.id }).map((t) => ({
          id: t.id,
          text: t.text,
          completed: t.completed,
          created_at: t.createdAt,
          completed_at: t.completedAt,
        }));
        return Response.json({ session_id: session.id, todos });
      },
    },
    {
      method: "GET",
      path: "/v1/sessions/{id}/trace",
      handle: (request, { params }) =>
        handleTrace(request, ownSession(deps, params.id, user(request)), trace),
    },
  ];
}
