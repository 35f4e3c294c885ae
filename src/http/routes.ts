/**
 * The route table. Every `/v1` route authenticates first and works on the caller's own sessions only: ids are
 * per user, so another user's session of the same id is simply not the caller's (404, as if unused).
 * @module
 */
import { parseSummary } from "../memory/summary.ts";
import { type Session, validateId } from "../store/store.ts";
import { traceTableOf } from "../store/open.ts";
import type { HandlerDeps } from "./deps.ts";
import { HttpError } from "./errors.ts";
import { OPENAPI } from "./openapi.ts";
import { handleChatCompletion } from "./openai_route.ts";
import { AGENT_MODEL, modelList, modelNotFound, modelObject, openaiErrorResponse } from "./openai_shape.ts";
import { handleTrace } from "./trace_route.ts";
import { handleTurn } from "./turn_route.ts";
import { handleApproval } from "./approval_route.ts";
import { handleCancel } from "./cancel_route.ts";
import { handleRunEvents } from "./run_events.ts";
import { approvalCalls } from "../approval/decisions.ts";
import { handleIndex, handleWebFile } from "./web_route.ts";
import { handleUsage } from "./usage_route.ts";
import { forgetMemory, listMemory } from "./memory_route.ts";
import { handleRename } from "./rename_route.ts";
import { messageJson, sessionListItem, todoJson } from "../session/session_json.ts";

/** One route: a method, a path template such as `/v1/sessions/{id}/messages`, and its handler. */
export interface Route {
  method: "GET" | "POST" | "PATCH" | "DELETE";
  path: string;
  /** Answers `request`, given the template's parameters (URI-decoded). */
  handle(request: Request, params: Record<string, string>): Promise<Response> | Response;
  /** Writes an error of this path as a response. @default {(error) => error.response()} */
  errorResponse?(error: HttpError): Response;
}

function route(
  method: Route["method"],
  path: string,
  handle: Route["handle"],
  errorResponse?: Route["errorResponse"],
): Route {
  return errorResponse === undefined ? { method, path, handle } : { method, path, handle, errorResponse };
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
  const trace = deps.trace ?? traceTableOf(store);
  /** `/mcp` of the caller, when the agent is served over MCP. */
  const mcp = (request: Request) => {
    const userId = user(request);
    if (deps.mcp === undefined) {
      throw new HttpError(404, "not_found", "MCP is not served here: start serve with AGENT_SERVE_MCP=true");
    }
    return deps.mcp.handle(request, userId, deps);
  };
  return [
    route("GET", "/healthz", async () => {
      const db = await store.ping();
      const mcp = deps.mcpHealth?.();
      const body = { ok: db, model: deps.model, db: db ? "ok" : "unavailable", ...(mcp ? { mcp } : {}) };
      return Response.json(body, { status: db ? 200 : 503 });
    }),
    route("GET", "/openapi.json", () => Response.json(OPENAPI)),
    route("GET", "/", () => handleIndex()),
    route("GET", "/web/{file}", (_request, params) => handleWebFile(`web/${params.file}`)),
    route("GET", "/text/{file}", (_request, params) => handleWebFile(`text/${params.file}`)),
    route("GET", "/v1/sessions", async (request) => {
      const sessions = await store.listSessions(user(request));
      return Response.json({ sessions: sessions.map(sessionListItem) });
    }),
    route("GET", "/v1/sessions/{id}", async (request, params) => {
      const session = await own(request, params.id);
      const messages = (await store.messages(keyOf(session))).map(messageJson);
      const { id: session_id, title, turnCount: turn_count, createdAt: created_at, updatedAt: updated_at } =
        session;
      const summary = parseSummary(session.summary);
      const pending = await store.pendingStep(keyOf(session));
      const pending_approval = pending === null ? null : {
        run_id: pending.runId,
        turn: pending.turn,
        calls: approvalCalls(pending),
        created_at: pending.createdAt,
      };
      return Response.json({
        session_id,
        title,
        turn_count,
        summary,
        created_at,
        updated_at,
        messages,
        pending_approval,
      });
    }),
    route("PATCH", "/v1/sessions/{id}", async (request, params) => {
      return await handleRename(request, await own(request, params.id), deps);
    }),
    route("DELETE", "/v1/sessions/{id}", async (request, params) => {
      const key = keyOf(await own(request, params.id));
      // Through the session's queue and lease, so a delete never lands in the middle of a running turn,
      // this server's or another's.
      await deps.sessions.run(key, () => store.deleteSession(key), { signal: request.signal });
      return new Response(null, { status: 204 });
    }),
    route("POST", "/v1/sessions/{id}/messages", (request, params) => {
      return handleTurn(request, { userId: user(request), sessionId: validateId(params.id) }, deps);
    }),
    route("POST", "/v1/sessions/{id}/retry", async (request, params) => {
      return handleTurn(request, keyOf(await own(request, params.id)), deps, { retry: true });
    }),
    route("POST", "/v1/sessions/{id}/approvals", async (request, params) => {
      return handleApproval(request, keyOf(await own(request, params.id)), deps);
    }),
    route("POST", "/v1/sessions/{id}/cancel", async (request, params) => {
      return handleCancel(request, await own(request, params.id), deps);
    }),
    route("GET", "/v1/sessions/{id}/runs/{run_id}/events", async (request, params) => {
      const session = await own(request, params.id);
      return handleRunEvents(request, { session, runId: validateId(params.run_id, "run id") }, deps);
    }),
    route("GET", "/v1/sessions/{id}/todos", async (request, params) => {
      const session = await own(request, params.id);
      const todos = (await store.listTodos(keyOf(session))).map(todoJson);
      return Response.json({ session_id: session.id, todos });
    }),
    route("GET", "/v1/usage", (request) => handleUsage(request, user(request), deps)),
    route("GET", "/v1/memory", (request) => listMemory(store, user(request))),
    route("DELETE", "/v1/memory", (request) => forgetMemory(store, user(request))),
    route("DELETE", "/v1/memory/{id}", (request, params) => forgetMemory(store, user(request), params.id)),
    route("GET", "/v1/sessions/{id}/trace", async (request, params) => {
      return handleTrace(request, await own(request, params.id), trace);
    }),
    // The agent as an MCP server (Streamable HTTP): JSON-RPC in, JSON or SSE out.
    route("POST", "/mcp", mcp),
    route("GET", "/mcp", mcp),
    route("DELETE", "/mcp", mcp),
    // OpenAI-compatible: the agent as the model `mini-agent`, errors in OpenAI's shape.
    route("GET", "/v1/models", (request) => {
      user(request);
      return Response.json(modelList());
    }, openaiErrorResponse),
    route("GET", "/v1/models/{model}", (request, params) => {
      user(request);
      if (params.model !== AGENT_MODEL) throw modelNotFound(params.model, null);
      return Response.json(modelObject());
    }, openaiErrorResponse),
    route("POST", "/v1/chat/completions", (request) => {
      return handleChatCompletion(request, user(request), deps);
    }, openaiErrorResponse),
  ];
}
