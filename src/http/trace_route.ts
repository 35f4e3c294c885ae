/**
 * `GET /v1/sessions/{id}/trace`: one page of the session's trace events from the database's trace table, so a
 * request never reads the whole trace; the page's cursor travels as opaque text.
 * @module
 */
import type { Session } from "../store/store.ts";
import type { TracePages } from "../trace/shared_trace.ts";
import { HttpError } from "./errors.ts";

/** Events per page when the request names no `limit`. */
export const DEFAULT_TRACE_LIMIT = 200;
/** The largest `limit` a request may ask for. */
export const MAX_TRACE_LIMIT = 1000;

/** Encodes a cursor (the next event's row id) as opaque URL-safe text, valid across restarts and processes. */
export function encodeTraceCursor(cursor: number): string {
  // Digits and colons never encode to "+" or "/", so the text needs no escaping in a query string.
  return btoa(`t2:db:${cursor}`).replaceAll("=", "");
}

/** Decodes {@linkcode encodeTraceCursor}'s text. @throws {SyntaxError} when the text is not a cursor. */
export function decodeTraceCursor(text: string): number {
  let plain = "";
  try {
    plain = atob(text);
  } catch {
    // Not base64: reported below.
  }
  const match = /^t2:db:(\d{1,15})$/.exec(plain);
  if (match === null) throw new SyntaxError(`Cannot read cursor "${text.slice(0, 40)}": not a trace cursor`);
  return Number(match[1]);
}

/**
 * `{session_id, events, next_cursor}` for the caller's own `session`: its events since it was created, oldest
 * first, `?limit=` at a time from `?cursor=`, optionally of one `?run_id=`. A bad `limit` or `cursor` is a 400.
 */
export async function handleTrace(
  request: Request,
  session: Session,
  reader: TracePages | null,
): Promise<Response> {
  if (reader === null) throw noTraceTable("Cannot read the trace");
  const params = new URL(request.url).searchParams;
  const limit = parseLimit(params.get("limit"));
  const cursor = parseCursor(params.get("cursor"));
  // Trace lines outlive a deleted session: older events belong to an earlier session of the same id.
  const { userId, id: sessionId, createdAt: since } = session;
  const page = await reader.page({ userId, sessionId, since, runId: params.get("run_id"), limit, cursor });
  const next_cursor = page.nextCursor === null ? null : encodeTraceCursor(page.nextCursor);
  return Response.json({ session_id: session.id, events: page.events, next_cursor });
}

/** The 501 of a route that reads the trace table, on a store that keeps none; `action` says what failed. */
export function noTraceTable(action: string): HttpError {
  return new HttpError(501, "trace_unavailable", `${action}: this session store keeps no trace table`);
}

function parseLimit(text: string | null): number {
  if (text === null) return DEFAULT_TRACE_LIMIT;
  const limit = /^\d{1,4}$/.test(text) ? Number(text) : NaN;
  if (limit >= 1 && limit <= MAX_TRACE_LIMIT) return limit;
  const message = `limit must be an integer from 1 to ${MAX_TRACE_LIMIT}, got "${text.slice(0, 20)}"`;
  throw new HttpError(400, "invalid_limit", `Cannot read the trace: ${message}`);
}

function parseCursor(text: string | null): number | null {
  if (text === null) return null;
  try {
    return decodeTraceCursor(text);
  } catch (error) {
    const message = "Cannot read the trace: cursor is not one this route returned as next_cursor";
    throw new HttpError(400, "invalid_cursor", message, { cause: error });
  }
}
