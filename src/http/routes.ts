/**
 * The route table. Every `/v1` route authenticates first and works on the caller's own sessions only: ids are
 * per user, so another user's session of the same id is simply not the caller's (404, as if unused).
 * @module
 */
import { parseSummary } from "../memory/summary.ts";
import { type Session, validateId } from "../store/store.ts";
import { TraceReader } from "../trace/reader.ts";
import type { HandlerDeps } from "./deps.ts";
import { HttpError } from "./errors.ts";
import { OPENAPI } from "./openapi.ts";
import { handleTrace } from "./trace_route.ts";
import { handleTurn, queueKey } from "./turn_route.ts";

/** What a route handler receives besides the request. */
export interface RouteContext {
  params: Record<string, string>;
  url: URL;
}

/** One route: a method and a path template such as `/v1/sessions/{id}/messages`. */
export interface Route {
  method: "GET" | "POST" | "DELETE";
  path: string;
  handle(request: Request, context: RouteContext): Promise<Response> | Response;
}

/** The routes the server serves, in matching order (a test checks OpenAPI describes each). */
export function createRoutes(deps: HandlerDeps): Route[] {
  const { store } = deps.agent;
  const user = (request: Request) => deps.authenticator.authenticate(request);
  /** The caller's session `id`: 400 for a malformed id, 404 when the caller has none. */
  const own = async (request: Request, id: string): Promise<Session> => {
    const session = await store.get({ userId: user(request), sessionId: id });
    if (session === null) throw new HttpError(404, "not_found", `Session "${id}" not found`);
    return session;
  };
  const keyOf = (session: Session) => ({ userId: session.userId, sessionId: session.id });
  const trace = deps.traceReader ?? new TraceReader(deps.tracePath);
  return [
    {
      method: "GET",
      path: "/healthz",
      handle: async () => {
        const db = await store.ping();
        return Response.json({ ok: db, model: deps.model, db: db ? "ok" : "unavailable" }, {
          status: db ? 200 : 503,
        });
      },
    },
    { method: "GET", path: "/openapi.json", handle: () => Response.json(OPENAPI) },
    {
      method: "GET",
      path: "/v1/sessions",
      handle: async (request) => {
        const sessions = (await store.listSessions(user(request))).map((s) => ({
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
      handle: async (request, { params }) => {
        const session = await own(request, params.id);
        const messages = (await store.messages(keyOf(session))).map((m) => ({
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
        const key = keyOf(await own(request, params.id));
        // Through the session's queue, so a delete never lands in the middle of a running turn.
        await deps.queue.run(queueKey(key), () => store.deleteSession(key), { signal: request.signal });
        return new Response(null, { status: 204 });
      },
    },
    {
      method: "POST",
      path: "/v1/sessions/{id}/messages",
      handle: (request, { params }) =>
        handleTurn(request, { userId: user(request), sessionId: validateId(params.id) }, deps),
    },
    {
      method: "POST",
      path: "/v1/sessions/{id}/retry",
      handle: async (request, { params }) =>
        handleTurn(request, keyOf(await own(request, params.id)), deps, { retry: true }),
    },
    {
      method: "GET",
      path: "/v1/sessions/{id}/todos",
      handle: async (request, { params }) => {
        const session = await own(request, params.id);
        const todos = (await store.listTodos(keyOf(session))).map((t) => ({
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
      handle: async (request, { params }) => handleTrace(request, await own(request, params.id), trace),
    },
  ];
}
