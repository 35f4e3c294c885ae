/**
 * `GET /`, `GET /web/{file}` and `GET /text/{file}`: the web page, served by the same process. Its files are imported as text,
 * so they are part of the module graph: read once when the server loads, embedded by `deno compile`, and
 * needing no `--allow-read` at run time. Every response carries a strict Content-Security-Policy.
 * @module
 */
import INDEX from "../web/index.html" with { type: "text" };
import STYLE from "../web/style.css" with { type: "text" };
import API from "../web/api.js" with { type: "text" };
import APP from "../web/app.js" with { type: "text" };
import APPROVALS from "../web/approvals.js" with { type: "text" };
import CHAT from "../web/chat.js" with { type: "text" };
import COST from "../text/cost.js" with { type: "text" };
import DOM from "../web/dom.js" with { type: "text" };
import MARKDOWN from "../text/markdown.js" with { type: "text" };
import MARKDOWN_VIEW from "../web/markdown_view.js" with { type: "text" };
import MEMORY from "../web/memory.js" with { type: "text" };
import REMEMBERED from "../web/remembered.js" with { type: "text" };
import TIMELINE from "../web/timeline.js" with { type: "text" };
import TITLE from "../text/title.js" with { type: "text" };
import { HttpError } from "./errors.ts";

/** No inline script or style, nothing from another origin, no framing: the page runs only its own files. */
export const CONTENT_SECURITY_POLICY = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self'",
  "connect-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join("; ");

const JS = "text/javascript; charset=utf-8";

/**
 * The page's files by path, `web/{file}` (the page) and `text/{file}` (the text rules the server shares with
 * it), with their media types.
 */
export const WEB_FILES: ReadonlyMap<string, { body: string; type: string }> = new Map([
  ["web/style.css", { body: STYLE, type: "text/css; charset=utf-8" }],
  ["web/api.js", { body: API, type: JS }],
  ["web/app.js", { body: APP, type: JS }],
  ["web/approvals.js", { body: APPROVALS, type: JS }],
  ["web/chat.js", { body: CHAT, type: JS }],
  ["text/cost.js", { body: COST, type: JS }],
  ["web/dom.js", { body: DOM, type: JS }],
  ["text/markdown.js", { body: MARKDOWN, type: JS }],
  ["web/markdown_view.js", { body: MARKDOWN_VIEW, type: JS }],
  ["web/memory.js", { body: MEMORY, type: JS }],
  ["web/remembered.js", { body: REMEMBERED, type: JS }],
  ["web/timeline.js", { body: TIMELINE, type: JS }],
  ["text/title.js", { body: TITLE, type: JS }],
]);

function page(body: string, type: string): Response {
  return new Response(body, {
    headers: {
      "content-type": type,
      "content-security-policy": CONTENT_SECURITY_POLICY,
      "x-content-type-options": "nosniff",
      "referrer-policy": "no-referrer",
      // Revalidated on every load, so a new release is never mixed with cached modules of an old one.
      "cache-control": "no-cache",
    },
  });
}

/** The page itself. No auth: it holds no data; it asks for a token when the API answers 401. */
export function handleIndex(): Response {
  return page(INDEX, "text/html; charset=utf-8");
}

/** One of {@linkcode WEB_FILES}, by its path. @throws {HttpError} 404 for any other path. */
export function handleWebFile(path: string): Response {
  const file = WEB_FILES.get(path);
  if (file === undefined) throw new HttpError(404, "not_found", `No web file "${path.slice(0, 60)}"`);
  return page(file.body, file.type);
}
