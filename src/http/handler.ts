/**
 * The HTTP handler: `(Request) => Promise<Response>` on web standards, so tests call it directly. It matches
 * the table of `routes.ts` in order, and every failure becomes a response through `toHttpError`.
 * @module
 */
import type { HandlerDeps } from "./deps.ts";
import { HttpError, shuttingDown, toHttpError } from "./errors.ts";
import { checkHostAndOrigin } from "./host_guard.ts";
import { createRoutes, type Route } from "./routes.ts";

/** The one line the handler logs per request, `POST /v1/sessions/a/messages 200 104ms`; other lines differ. */
export const REQUEST_LINE = /^[A-Z]+ \S+ \d{3} \d+ms$/;

/**
 * Builds the handler. The returned function never rejects: every failure becomes a JSON error response.
 * Before any route, a request of a host or an origin `host_guard.ts` refuses gets its 403.
 */
export function createHandler(deps: HandlerDeps): (request: Request) => Promise<Response> {
  const match = compile(createRoutes(deps));
  return async (request) => {
    const started = performance.now();
    const url = new URL(request.url);
    const found = match(request.method, url.pathname);
    let response: Response;
    try {
      if (deps.isShuttingDown()) throw shuttingDown({ headers: { "Retry-After": "5" } });
      checkHostAndOrigin(request, deps.hosts ?? {}, deps.authenticator.enabled);
      if ("error" in found) throw found.error;
      // Declared by the route, done here once: a route of `auth: "user"` runs only for an authenticated caller.
      const userId = found.route.auth === "user" ? deps.authenticator.authenticate(request) : "";
      response = await found.route.handle(request, found.params, userId);
    } catch (error) {
      const failure = toHttpError(error, deps.log);
      // In the shape of the path's routes (the OpenAI-compatible ones have their own), even for a 405.
      response = found.route?.errorResponse?.(failure) ?? failure.response();
    }
    if (request.method === "HEAD" && response.body !== null) {
      // The GET response's status and headers, without its body.
      await response.body.cancel();
      response = new Response(null, { status: response.status, headers: response.headers });
    }
    // The path only: query strings and headers (tokens) never reach the log.
    const ms = Math.round(performance.now() - started);
    deps.log(`${request.method} ${url.pathname} ${response.status} ${ms}ms`);
    if (!request.bodyUsed && request.body !== null && response.status >= 400) {
      await request.body.cancel().catch(() => {});
    }
    return response;
  };
}

/** The route of a request with its parameters, or the error to answer with (and a route of that path). */
type Match =
  | { route: Route; params: Record<string, string> }
  | { route: Route | undefined; error: HttpError };

/**
 * A matcher over the `METHOD /path/{param}` table, in order, each template a `URLPattern` (`{id}` is one path
 * segment): parameters come URI-decoded and `HEAD` matches `GET` (in `Allow` too). It never throws: an unknown
 * path matches with a 404 error, another method with a 405.
 */
function compile(routes: readonly Route[]): (method: string, pathname: string) => Match {
  const compiled = routes.map((route) => {
    const pathname = route.path.replace(/\{(\w+)\}/g, (_, name: string) => `:${name}([^/]+)`);
    return { route, pattern: new URLPattern({ pathname }) };
  });
  return (method, pathname) => {
    const allow: string[] = [];
    let other: Route | undefined;
    for (const { route, pattern } of compiled) {
      const found = pattern.exec({ pathname });
      if (found === null) continue;
      if (route.method === (method === "HEAD" ? "GET" : method)) {
        const groups = Object.entries(found.pathname.groups);
        return {
          route,
          params: Object.fromEntries(groups.map(([name, value]) => [name, decode(value ?? "")])),
        };
      }
      other ??= route;
      allow.push(...(route.method === "GET" ? ["GET", "HEAD"] : [route.method]));
    }
    if (allow.length === 0) {
      return { route: undefined, error: new HttpError(404, "not_found", `No route for ${pathname}`) };
    }
    const headers = { Allow: allow.join(", ") };
    const message = `${method} is not allowed on ${pathname}`;
    return { route: other, error: new HttpError(405, "method_not_allowed", message, { headers }) };
  };
}

function decode(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text; // A malformed percent-escape: kept raw for the id validator to reject.
  }
}
