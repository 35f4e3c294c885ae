/**
 * The HTTP handler: `(Request) => Promise<Response>` on web standards, so tests call it directly. It matches
 * the table of `routes.ts` in order, and every failure becomes a response through `toHttpError`.
 * @module
 */
import type { HandlerDeps } from "./deps.ts";
import { HttpError, shuttingDown, toHttpError } from "./errors.ts";
import { createRoutes, type Route } from "./routes.ts";

/** The one line the handler logs per request, `POST /v1/sessions/a/messages 200 104ms`; other lines differ. */
export const REQUEST_LINE = /^[A-Z]+ \S+ \d{3} \d+ms$/;

/** Builds the handler. The returned function never rejects: every failure becomes a JSON error response. */
export function createHandler(deps: HandlerDeps): (request: Request) => Promise<Response> {
  const match = compile(createRoutes(deps));
  return async (request) => {
    const started = performance.now();
    const url = new URL(request.url);
    let response: Response;
    try {
      if (deps.isShuttingDown()) throw shuttingDown({ headers: { "Retry-After": "5" } });
      const { route, params } = match(request.method, url.pathname);
      response = await route.handle(request, params);
    } catch (error) {
      response = toHttpError(error, deps.log).response();
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

/**
 * A matcher over the `METHOD /path/{param}` table, in order: parameters come URI-decoded and `HEAD` matches
 * `GET` (in `Allow` too). The matcher throws a 404 `HttpError` for an unknown path, a 405 for another method.
 */
function compile(routes: readonly Route[]) {
  const compiled = routes.map((route) => {
    const names: string[] = [];
    const escaped = route.path.replace(/[.*+?^$()|[\]\\]/g, "\\$&");
    const source = escaped.replace(/\{(\w+)\}/g, (_, name: string) => {
      names.push(name);
      return "([^/]+)";
    });
    return { route, pattern: new RegExp(`^${source}$`), names };
  });
  return (method: string, pathname: string): { route: Route; params: Record<string, string> } => {
    const allow: string[] = [];
    for (const { route, pattern, names } of compiled) {
      const found = pattern.exec(pathname);
      if (found === null) continue;
      if (route.method === (method === "HEAD" ? "GET" : method)) {
        return { route, params: Object.fromEntries(names.map((name, i) => [name, decode(found[i + 1])])) };
      }
      allow.push(...(route.method === "GET" ? ["GET", "HEAD"] : [route.method]));
    }
    if (allow.length === 0) throw new HttpError(404, "not_found", `No route for ${pathname}`);
    const headers = { Allow: allow.join(", ") };
    throw new HttpError(405, "method_not_allowed", `${method} is not allowed on ${pathname}`, { headers });
  };
}

function decode(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text; // A malformed percent-escape: kept raw for the id validator to reject.
  }
}
