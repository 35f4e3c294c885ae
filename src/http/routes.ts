/**
 * The route table. Each route declares who may call it; every `/v1` route and `/mcp` authenticate first (the
 * handler does, before the route runs) and work on the caller's own sessions only: ids are per user, so
 * another user's session of the same id is simply not the caller's (404, as if unused).
 * @module
 */
import { parseSummary } from "../memory/summary.ts";
import { type Session, validateId } from "../store/store.ts";
import { traceTableOf } from "../store/open.ts";
import { readJsonBody } from "./body.ts";
import type { HandlerDeps } from "./deps.ts";
import { HttpError } from "./errors.ts";
import { OPENAPI } from "./openapi.ts";
import { handleChatCompletion } from "./openai_route.ts";
import { handleCreateResponse, handleGetResponse } from "./responses_route.ts";
import { AGENT_MODEL, modelList, modelNotFound, modelObject, openaiErrorResponse } from "./openai_shape.ts";
import { handleTrace } from "./trace_route.ts";
import { handleTurn } from "./turn_route.ts";
import { handleCancel } from "./cancel_route.ts";
import { handleRunEvents } from "./run_events.ts";
import { approvalCalls } from "../approval/decisions.ts";
import { handleIndex, handleWebFile } from "./web_route.ts";
import { handleUsage } from "./usage_route.ts";
import { forgetMemory, listMemory } from "./memory_route.ts";
import { handleRename } from "./rename_route.ts";
import { messageJson, sessionListItem, todoJson } from "../session/session_json.ts";

/**
 * One route: a method, a path template such as `/v1/sessions/{id}/messages`, who may call it, and its
 * handler.
 */
export interface Route {
  method: "GET" | "POST" | "PATCH" | "DELETE";
  path: string;
  /**
   * `user`: the handler authenticates the caller before the route runs (401 without a valid token when
   * tokens are configured), and `handle` gets the caller's user id; `none`: anyone, and the id is "".
   */
  auth: "user" | "none";
  /** Answers `request`, given the template's parameters (URI-decoded) and the caller. */
  handle(request: Request, params: Record<string, string>, userId: string): Promise<Response> | Response;
  /** Writes an error of this path as a response. @default {(error) => error.response()} */
  errorResponse?(error: HttpError): Response;
}

/** Options of {@linkcode route}: `auth` (@default {"user"}) and `errorResponse`. */
type RouteOptions = Partial<Pick<Route, "auth" | "errorResponse">>;

function route(
  method: Route["method"],
  path: string,
  handle: Route["handle"],
  options: RouteOptions = {},
): Route {
  const { auth = "user", errorResponse } = options;
  return { method, path, auth, handle, errorResponse };
}

/** A route anyone may call: no auth. */
const NONE: RouteOptions = { auth: "none" };
/** An OpenAI-compatible route: its errors in OpenAI's shape. */
const OPENAI: RouteOptions = { errorResponse: openaiErrorResponse };

/** The routes the server serves, in matching order (a test checks OpenAPI describes each). */
export function createRoutes(deps: HandlerDeps): Route[] {
  const { store } = deps;
  /** The caller's session `id`: 400 for a malformed id, 404 when the caller has none. */
  const own = async (userId: string, id: string): Promise<Session> => {
    const session = await store.get({ userId, sessionId: id });
    if (session === null) throw new HttpError(404, "not_found", `Session "${id}" not found`);
    return session;
  };
  const keyOf = (session: Session) => ({ userId: session.userId, sessionId: session.id });
  const trace = deps.trace ?? traceTableOf(store);
  /** `/mcp` of the caller, when the agent is served over MCP. */
  const mcp = async (request: Request, _params: Record<string, string>, userId: string) => {
    if (deps.mcp === undefined) {
      throw new HttpError(404, "not_found", "MCP is not served here: start serve with AGENT_SERVE_MCP=true");
    }
    const body = request.method === "POST"
      ? await readJsonBody(request, { maxBytes: deps.maxBodyBytes })
      : undefined;
    return await deps.mcp.handle(request, userId, deps, body);
  };
  return [
    route("GET", "/healthz", async () => {
      const db = await store.ping();
      const mcp = deps.mcpHealth?.();
      const body = { ok: db, model: deps.model, db: db ? "ok" : "unavailable", ...(mcp ? { mcp } : {}) };
      return Response.json(body, { status: db ? 200 : 503 });
    }, NONE),
    route("GET", "/openapi.json", () => Response.json(OPENAPI), NONE),
    route("GET", "/", () => handleIndex(), NONE),
    route("GET", "/web/{file}", (_request, params) => handleWebFile(`web/${params.file}`), NONE),
    route("GET", "/text/{file}", (_request, params) => handleWebFile(`text/${params.file}`), NONE),
    route("GET", "/v1/sessions", async (_request, _params, userId) => {
      const sessions = await store.listSessions(userId);
      return Response.json({ sessions: sessions.map(sessionListItem) });
    }),
    route("GET", "/v1/sessions/{id}", async (_request, params, userId) => {
      const session = await own(userId, params.id);
      const messages = (await store.messages(keyOf(session))).map(messageJson);
      const pending = await store.pendingStep(keyOf(session));
      const pending_approval = pending === null ? null : {
        run_id: pending.runId,
        turn: pending.turn,
        calls: approvalCalls(pending),
        created_at: pending.createdAt,
      };
      return Response.json({
        session_id: session.id,
        title: session.title,
        turn_count: session.turnCount,
        summary: parseSummary(session.summary),
        created_at: session.createdAt,
        updated_at: session.updatedAt,
        messages,
        pending_approval,
      });
    }),
    route("PATCH", "/v1/sessions/{id}", async (request, params, userId) => {
      return await handleRename(request, await own(userId, params.id), deps);
    }),
    route("DELETE", "/v1/sessions/{id}", async (request, params, userId) => {
      const key = keyOf(await own(userId, params.id));
      // Through the session's queue and lease, so a delete never lands in the middle of a running turn,
      // this server's or another's.
      await deps.sessions.run(key, () => store.deleteSession(key), { signal: request.signal });
      return new Response(null, { status: 204 });
    }),
    route("POST", "/v1/sessions/{id}/messages", (request, params, userId) => {
      return handleTurn(request, { userId, sessionId: validateId(params.id) }, deps);
    }),
    route("POST", "/v1/sessions/{id}/retry", async (request, params, userId) => {
      return handleTurn(request, keyOf(await own(userId, params.id)), deps, { retry: true });
    }),
    route("POST", "/v1/sessions/{id}/approvals", async (request, params, userId) => {
      return handleTurn(request, keyOf(await own(userId, params.id)), deps, { decisions: true });
    }),
    route("POST", "/v1/sessions/{id}/cancel", async (request, params, userId) => {
      return handleCancel(request, await own(userId, params.id), deps);
    }),
    route("GET", "/v1/sessions/{id}/runs/{run_id}/events", async (request, params, userId) => {
      const session = await own(userId, params.id);
      return handleRunEvents(request, { session, runId: validateId(params.run_id, "run id") }, deps);
    }),
    route("GET", "/v1/sessions/{id}/todos", async (_request, params, userId) => {
      const session = await own(userId, params.id);
      const todos = (await store.listTodos(keyOf(session))).map(todoJson);
      return Response.json({ session_id: session.id, todos });
    }),
    route("GET", "/v1/usage", (request, _params, userId) => handleUsage(request, userId, deps)),
    route("GET", "/v1/memory", (_request, _params, userId) => listMemory(store, userId)),
    route("DELETE", "/v1/memory", (_request, _params, userId) => forgetMemory(store, userId)),
    route("DELETE", "/v1/memory/{id}", (_request, params, userId) => forgetMemory(store, userId, params.id)),
    route("GET", "/v1/sessions/{id}/trace", async (request, params, userId) => {
      return handleTrace(request, await own(userId, params.id), trace);
    }),
    // The agent as an MCP server (Streamable HTTP): JSON-RPC in, JSON or SSE out.
    route("POST", "/mcp", mcp),
    route("GET", "/mcp", mcp),
    route("DELETE", "/mcp", mcp),
    // OpenAI-compatible: the agent as the model `mini-agent`, errors in OpenAI's shape.
    route("GET", "/v1/models", () => Response.json(modelList()), OPENAI),
    route("GET", "/v1/models/{model}", (_request, params) => {
      if (params.model !== AGENT_MODEL) throw modelNotFound(params.model, null);
      return Response.json(modelObject());
    }, OPENAI),
    route("POST", "/v1/chat/completions", (request, _params, userId) => {
      return handleChatCompletion(request, userId, deps);
    }, OPENAI),
    route("POST", "/v1/responses", (request, _params, userId) => {
      return handleCreateResponse(request, userId, deps);
    }, OPENAI),
    route("GET", "/v1/responses/{id}", (_request, params, userId) => {
      return handleGetResponse(params.id, userId, deps);
    }, OPENAI),
  ];
}
