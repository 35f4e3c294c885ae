/**
 * The HTTP handler: `(Request) => Promise<Response>` on web standards, so tests call it directly.
 * Authentication and the routes are in `routes.ts`; every failure becomes a response through `toHttpError`.
 * @module
 */
import type { HandlerDeps } from "./deps.ts";
import { HttpError, toHttpError } from "./errors.ts";
import { Router } from "./router.ts";
import { createRoutes } from "./routes.ts";

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
      response = toHttpError(error, deps.log).response();
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
