/**
 * Which requests a server on the user's machine serves, against DNS rebinding: a web page on another site
 * whose name the attacker points at 127.0.0.1 reaches a loopback server with its own name in `Host` and its
 * own origin in `Origin`. Without API tokens only a loopback `Host` on the listening port is served (plus the
 * names of `AGENT_ALLOWED_HOSTS`, for a proxy in front); with or without tokens, a request that changes
 * something (any method but GET and HEAD) from a page of another origin is refused.
 * @module
 */
import { authority } from "../_config_values.ts";
import { HttpError } from "./errors.ts";

/** The rules of {@linkcode checkHostAndOrigin} besides whether tokens are configured. */
export interface HostRules {
  /**
   * Names served besides loopback ones, and origins accepted besides the server's own, lowercased, as
   * `AGENT_ALLOWED_HOSTS` gives them: `name` (any port) or `name:port`. @default {[]}
   */
  allowed?: readonly string[];
  /**
   * The port the server listens on; loopback names are served on it alone.
   * @default {undefined} (a handler called directly: loopback names on any port)
   */
  port?: number;
}

const LOOPBACK = new Set(["127.0.0.1", "localhost", "[::1]"]);
const DEFAULT_PORT: Record<string, string> = { "http:": "80", "https:": "443" };

function forbidden(code: string, message: string): HttpError {
  return new HttpError(403, code, message);
}

/**
 * Refuses `request` with a 403 whose message says why, or returns. The `Host` is the header when there is
 * one and the request line's authority otherwise (Deno builds `request.url` from either); both are checked.
 * @throws {HttpError} 403 `host_not_allowed` or `origin_not_allowed`
 */
export function checkHostAndOrigin(request: Request, rules: HostRules, tokens: boolean): void {
  const fromUrl = new URL(request.url).host;
  const header = request.headers.get("host");
  const host = header ?? fromUrl;
  if (!tokens) {
    for (const candidate of header === null || header === fromUrl ? [host] : [header, fromUrl]) {
      if (!hostServed(candidate, rules)) {
        const { port } = rules;
        const loopback = port === undefined
          ? "127.0.0.1, localhost or [::1]"
          : `127.0.0.1:${port}, localhost:${port} or [::1]:${port}`;
        const shown = JSON.stringify(candidate);
        throw forbidden(
          "host_not_allowed",
          `Host ${shown} is not served: without API tokens this server answers only ${loopback} (a page of` +
            " another site can reach loopback by DNS rebinding); for a proxy in front, add its name to" +
            " AGENT_ALLOWED_HOSTS",
        );
      }
    }
  }
  if (request.method === "GET" || request.method === "HEAD") return;
  const origin = request.headers.get("origin");
  if (origin !== null && !sameOrigin(origin, host) && !allowedOrigin(origin, rules)) {
    throw forbidden(
      "origin_not_allowed",
      `Origin ${JSON.stringify(origin)} may not change anything here: only this server's own page ` +
        `(${JSON.stringify(host)}) may send ${request.method} requests from a browser`,
    );
  }
}

function hostServed(host: string, rules: HostRules): boolean {
  const parsed = authority(host);
  if (parsed === null) return false;
  const { hostname, port } = parsed;
  const listening = rules.port;
  if (LOOPBACK.has(hostname) && (listening === undefined || (port || "80") === String(listening))) {
    return true;
  }
  return allowedName(hostname, port || "80", rules);
}

function allowedName(hostname: string, port: string, rules: HostRules): boolean {
  return (rules.allowed ?? []).some((entry) => entry === hostname || entry === `${hostname}:${port}`);
}

/** Whether `origin` is a page of a name of `AGENT_ALLOWED_HOSTS` (a proxy that rewrites `Host`). */
function allowedOrigin(origin: string, rules: HostRules): boolean {
  const url = originUrl(origin);
  return url !== null && allowedName(url.hostname, url.port || DEFAULT_PORT[url.protocol], rules);
}

/** `origin` as a URL when it is an http(s) origin, else null (`null` from a sandboxed frame or a file). */
function originUrl(origin: string): URL | null {
  try {
    const url = new URL(origin);
    return url.protocol in DEFAULT_PORT ? url : null;
  } catch {
    return null;
  }
}

/** Whether `origin` (a browser's `Origin` header) is the origin of the server that `host` names. */
function sameOrigin(origin: string, host: string): boolean {
  const url = originUrl(origin);
  const parsed = authority(host);
  if (url === null || parsed === null) return false;
  const defaultPort = DEFAULT_PORT[url.protocol];
  return url.hostname === parsed.hostname && (url.port || defaultPort) === (parsed.port || defaultPort);
}
