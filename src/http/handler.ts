/**
 * The HTTP handler: `(Request) => Promise<Response>` on web standards, built from injected dependencies so
 * tests call it directly. Authentication, routing and error mapping live here; the routes are in
 * `routes.ts` and `turn_route.ts`. An `HttpError` carries its status; anything else is a logged 500 whose
 * details never reach the client.
 * @module
 */
import { SessionError } from "../errors.ts";
import type { TurnDeps } from "../loop.ts";
import type { SessionStore } from "../store.ts";
import type { TraceReader } from "../trace_reader.ts";
import type { EventSink } from "../types.ts";
import type { Authenticator } from "./auth.ts";
import { errorResponse, HttpError, httpErrorResponse } from "./errors.ts";
import { Router } from "./router.ts";
import { createRoutes } from "./routes.ts";
import type { SessionQueue } from "./session_queue.ts";

/** Everything the handler needs. Only `src/main.ts` builds the real ones. */
export interface HandlerDeps {
  store: SessionStore;
  /** The loop's dependencies except the per-turn `emit` and `signal`. */
  turn: Omit<TurnDeps, "emit" | "signal">;
  /** Receives every run event (the trace). */
  emit: EventSink;
  authenticator: Authenticator;
  queue: SessionQueue;
  maxBodyBytes: number;
  /** The JSONL trace file the trace route reads (with its rotated files). */
  tracePath: string;
  /**
   * The index the trace route pages through; pass the one the tracer feeds (`onAppend`) so lines this
   * process writes are never read back to index them.
   * @default {new TraceReader(tracePath)}
   */
  traceReader?: TraceReader;
  /** The model name `/healthz` reports. */
  model: string;
  /** Aborts every running turn when the shutdown grace period is over. */
  shutdownSignal: AbortSignal;
  /** True once shutdown began: new requests get 503. */
  isShuttingDown(): boolean;
  /** One line per request and per unexpected error. Never receives tokens or keys. */
  log(line: string): void;
}

/** The one line the handler logs per request, `POST /v1/sessions/a/messages 200 104ms`; other lines differ. */
export const REQUEST_LINE = /^[A-Z]+ \S+ \d{3} \d+ms$/;

/** Builds the handler. The returned function never rejects: every failure becomes a JSON error response. */
export function createHandler(deps: HandlerDeps): (request: Request) => Promise<Response> {
  const router = new Router(createRoutes(deps));
  return async (request) => {
    const started = performance.now();
    const url = new URL(request.url);
    let response: Response;
    try {
      if (deps.isShuttingDown()) {
        throw new HttpError(503, "shutting_down", "The server is shutting down; retry elsewhere or later", {
          headers: { "Retry-After": "5" },
        });
      }
      const match = router.match(request.method, url.pathname);
      if (match.kind === "not_found") throw new HttpError(404, "not_found", `No route for ${url.pathname}`);
      if (match.kind === "wrong_method") {
        throw new HttpError(
          405,
          "method_not_allowed",
          `${request.method} is not allowed on ${url.pathname}`,
          {
            headers: { Allow: match.allow.join(", ") },
          },
        );
      }
      response = await match.route.handle(request, { params: match.params, url });
    } catch (error) {
      response = toResponse(error, deps);
    }
    if (request.method === "HEAD" && response.body !== null) {
      // The GET response's status and headers, without its body.
      await response.body.cancel();
      response = new Response(null, { status: response.status, headers: response.headers });
    }
    // The path only: query strings and headers (tokens) never reach the log.
    deps.log(
      `${request.method} ${url.pathname} ${response.status} ${Math.round(performance.now() - started)}ms`,
    );
    if (!request.bodyUsed && request.body !== null && response.status >= 400) {
      await request.body.cancel().catch(() => {});
    }
    return response;
  };
}

function toResponse(error: unknown, deps: HandlerDeps): Response {
  if (error instanceof HttpError) return httpErrorResponse(error);
  if (error instanceof SessionError) {
    if (error.reason === "nothing_to_retry") return errorResponse(409, "nothing_to_retry", error.message);
    return errorResponse(400, "invalid_session_id", error.message);
  }
  if (error instanceof DOMException && error.name === "AbortError") {
    // The client is gone; nobody reads this.
    return errorResponse(499, "client_closed_request", "The client closed the request");
  }
  deps.log(`error: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
  return errorResponse(500, "internal", "Internal server error");
}
