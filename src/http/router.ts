/**
 * A tiny router: `METHOD /path/{param}` templates matched in order. The table is data, so a test checks
 * that OpenAPI describes every route.
 * @module
 */

/** What a route handler receives besides the request. */
export interface RouteContext {
  params: Record<string, string>;
  url: URL;
}

/** One route. */
export interface Route {
  method: "GET" | "POST" | "DELETE";
  /** A path template such as `/v1/sessions/{id}/messages`. */
  path: string;
  handle(request: Request, context: RouteContext): Promise<Response> | Response;
}

/** The result of matching a request against the table. */
export type RouteMatch =
  | { kind: "found"; route: Route; params: Record<string, string> }
  | { kind: "wrong_method"; allow: string[] }
  | { kind: "not_found" };

interface Compiled {
  route: Route;
  pattern: RegExp;
  names: string[];
}

/** Compiles the table once; `match` is then a scan of regular expressions. */
export class Router {
  #routes: Compiled[];

  constructor(routes: readonly Route[]) {
    this.#routes = routes.map((route) => {
      const names: string[] = [];
      const escaped = route.path.replace(/[.*+?^$()|[\]\\]/g, "\\$&");
      const source = escaped.replace(/\{(\w+)\}/g, (_, name: string) => {
        names.push(name);
        return "([^/]+)";
      });
      return { route, pattern: new RegExp(`^${source}$`), names };
    });
  }

  /** The routes, in table order. */
  get routes(): Route[] {
    return this.#routes.map((c) => c.route);
  }

  /** The route for `method` and `pathname`, parameters URI-decoded; `HEAD` matches `GET` (in `Allow` too). */
  match(method: string, pathname: string): RouteMatch {
    const allow: string[] = [];
    const wanted = method === "HEAD" ? "GET" : method;
    for (const { route, pattern, names } of this.#routes) {
      const found = pattern.exec(pathname);
      if (found === null) continue;
      if (route.method !== wanted) {
        allow.push(...(route.method === "GET" ? ["GET", "HEAD"] : [route.method]));
        continue;
      }
      const params: Record<string, string> = {};
      names.forEach((name, i) => {
        try {
          params[name] = decodeURIComponent(found[i + 1]);
        } catch {
          // A malformed percent-escape: keep the raw text; the id validator rejects it.
          params[name] = found[i + 1];
        }
      });
      return { kind: "found", route, params };
    }
    return allow.length > 0 ? { kind: "wrong_method", allow } : { kind: "not_found" };
  }
}
