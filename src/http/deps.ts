/** What the HTTP handler and its routes are built from; only `src/main.ts` builds the real ones. @module */
import type { TracePages } from "../trace/shared_trace.ts";
import type { EventSink } from "../events.ts";
import type { TurnDeps } from "../session/turn.ts";
import type { SessionStore, TodoStore } from "../store/store.ts";
import type { ToolRegistry } from "../tools/registry.ts";
import type { Authenticator } from "./auth.ts";
import type { HostRules } from "./host_guard.ts";

/** The handler's dependencies: those of a turn (see `TurnDeps`), and the routes'. */
export interface HandlerDeps extends Pick<TurnDeps, "agent" | "dailyTokens" | "sessions"> {
  /** Where the sessions are kept, with their todos, the users' memory and token counts. */
  store: SessionStore;
  /**
   * The agent's tools with `todo` over `todos`, for a request that keeps no session (`POST
   * /v1/chat/completions` without a session id: its todos live as long as it does).
   */
  requestTools(todos: TodoStore): ToolRegistry;
  /** Receives every run event (the trace). */
  emit: EventSink;
  authenticator: Authenticator;
  /**
   * The names served without tokens besides loopback ones, and the listening port (set by `serveHttp`):
   * see `host_guard.ts`. @default {{}} (loopback names on any port)
   */
  hosts?: HostRules;
  maxBodyBytes: number;
  /**
   * Where the trace route reads: the session database's `trace_events` table, which the tracer's events are
   * shipped to (a `SharedTrace`, so a page first ships this process's queued ones). @default {the store's
   * table} (a store without one answers the route 501)
   */
  trace?: TracePages;
  /**
   * How a stream that follows a run from the trace table (`GET …/runs/{run_id}/events`) reads it: every
   * `pollMs`, ending after `maxIdleMs` without an event; a run with no event stored within `firstEventMs` is a
   * 404. @default {{pollMs: 100, maxIdleMs: 300000, firstEventMs: 5000}}
   */
  follow?: { pollMs?: number; maxIdleMs?: number; firstEventMs?: number };
  /** The model name `/healthz` reports. */
  model: string;
  /**
   * The agent's MCP server at `/mcp` (AGENT_SERVE_MCP); without it `/mcp` answers 404 saying how to turn it
   * on. @default {undefined}
   */
  mcp?: McpRoute;
  /** Each MCP server's state, by name, for `/healthz`. @default {undefined} (no MCP) */
  mcpHealth?: () => Record<string, unknown>;
  /** Aborts every running turn when the shutdown grace period is over. */
  shutdownSignal: AbortSignal;
  /** True once shutdown began: new requests get 503. */
  isShuttingDown(): boolean;
  /** One line per request and per unexpected error. Never receives tokens or keys. */
  log(line: string): void;
}

/** What serves `/mcp` (`McpEndpoint` of `src/mcp/http_endpoint.ts`), as the routes and the server use it. */
export interface McpRoute {
  /** Answers a request of `/mcp` from `userId` (a POST's `body` read), the session's turns run with `deps`. */
  handle(request: Request, userId: string, deps: HandlerDeps, body?: unknown): Promise<Response>;
  /** Ends the open streams of server messages, so a shutdown does not wait for them. */
  closeStreams(): void;
  /** Closes every MCP session. */
  close(): Promise<void>;
}
