/**
 * `GET /v1/sessions/{id}/trace`: one page of the session's trace events, through the trace index so a request
 * never reads the whole trace.
 * @module
 */
import type { Session } from "../store/store.ts";
import { decodeTraceCursor, encodeTraceCursor, type TraceCursor } from "../trace_cursor.ts";
import type { TraceReader } from "../trace_reader.ts";
import { HttpError } from "./errors.ts";

/** Events per page when the request names no `limit`. */
export const DEFAULT_TRACE_LIMIT = 200;
/** The largest `limit` a request may ask for. */
export const MAX_TRACE_LIMIT = 1000;

/**
 * `{session_id, events, next_cursor}` for the caller's own `session`: its events since it was created, oldest
 * first, `?limit=` at a time from `?cursor=`, optionally of one `?run_id=`. A bad `limit` or `cursor` is a 400.
 */
export async function handleTrace(
  request: Request,
  session: Session,
  reader: TraceReader,
): Promise<Response> {
  const params = new URL(request.url).searchParams;
  const limit = parseLimit(params.get("limit"));
  const cursor = parseCursor(params.get("cursor"));
  // Trace lines outlive a deleted session; events older than this session belong to an earlier one with
  // the same id and are never shown.
  const page = await reader.page({
    userId: session.userId,
    sessionId: session.id,
    since: session.createdAt,
    runId: params.get("run_id"),
    limit,
    cursor,
  });
  return Response.json({
    session_id: session.id,
    events: page.events,
    next_cursor: page.nextCursor && encodeTraceCursor(page.nextCursor),
  });
}

function parseLimit(text: string | null): number {
  if (text === null) return DEFAULT_TRACE_LIMIT;
  const limit = /^\d{1,4}$/.test(text) ? Number(text) : NaN;
  if (limit >= 1 && limit <= MAX_TRACE_LIMIT) return limit;
  const message = `limit must be an integer from 1 to ${MAX_TRACE_LIMIT}, got "${text.slice(0, 20)}"`;
  throw new HttpError(400, "invalid_limit", `Cannot read the trace: ${message}`);
}

function parseCursor(text: string | null): TraceCursor | null {
  if (text === null) return null;
  try {
    return decodeTraceCursor(text);
  } catch (error) {
    const message = "Cannot read the trace: cursor is not one this route returned as next_cursor";
    throw new HttpError(400, "invalid_cursor", message, { cause: error });
  }
}
