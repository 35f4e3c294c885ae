/**
 * A run's events as a resumable SSE stream. Every run event a turn's stream sends carries an `id` that a later
 * read of the database's trace table gives it again ({@linkcode RunEventIds}), so a client that lost the stream
 * reconnects to `GET /v1/sessions/{id}/runs/{run_id}/events` (with `Last-Event-ID`), on any replica, and gets
 * what it missed, then the rest as the table receives it, up to the run's `run_end`.
 * @module
 */
import { delay } from "../abort.ts";
import { isBackgroundEvent } from "../events.ts";
import { traceTableOf } from "../store/open.ts";
import type { Session } from "../store/store.ts";
import type { TracePage } from "../trace/shared_trace.ts";
import type { HandlerDeps } from "./deps.ts";
import { HttpError, toHttpError } from "./errors.ts";
import { sendErrorFrame, sseResponse, type SseSend } from "./sse.ts";
import { noTraceTable } from "./trace_route.ts";

/** An event id as its two numbers: the run's part (0, or the resumed step + 1) and the event's place in it. */
type EventId = readonly [part: number, place: number];

/**
 * The ids of a run's events, given them in order: `part.place`, where a run's events from `run_start` are part
 * 0 and those of its resumption after an approval (from `approval_decided`, at the paused step) part step + 1,
 * each event numbered from 1 within its part. So the live stream of a turn (a message, a retry, or decisions)
 * and a read of the table number an event alike, whichever process wrote it. A background compaction's
 * events, which follow the run's `run_end` and no turn's stream carries, get no id.
 */
export class RunEventIds {
  #part = 0;
  #place = 0;

  /** The id of `event`, the run's next one; null for an event no stream carries. */
  next(event: { event?: unknown; step?: unknown; data?: unknown }): string | null {
    if (isBackgroundEvent(event)) return null;
    if (event.event === "run_start") [this.#part, this.#place] = [0, 0];
    if (event.event === "approval_decided") [this.#part, this.#place] = [Number(event.step) + 1, 0];
    return `${this.#part}.${++this.#place}`;
  }
}

/** `text` as an event id, or null when it is not one {@linkcode RunEventIds} gives. */
function parseEventId(text: string): EventId | null {
  const match = /^(\d{1,6})\.(\d{1,9})$/.exec(text.trim());
  return match === null ? null : [Number(match[1]), Number(match[2])];
}

function after(id: EventId, than: EventId): boolean {
  return id[0] !== than[0] ? id[0] > than[0] : id[1] > than[1];
}

/** Whether the client who saw `event` last has seen its run end: a `run_end` not waiting for approval. */
function finished(event: Record<string, unknown> | null): boolean {
  const outcome = (event?.data as { outcome?: unknown } | undefined)?.outcome;
  return event?.event === "run_end" && outcome !== "awaiting_approval";
}

/** The last event id the client saw: the `Last-Event-ID` header, else `?last_event_id=`; null for none. */
function lastEventId(request: Request): EventId | null {
  const text = request.headers.get("last-event-id") ?? new URL(request.url).searchParams.get("last_event_id");
  if (text === null || text.trim() === "") return null;
  const id = parseEventId(text);
  if (id !== null) return id;
  const shown = JSON.stringify(text.slice(0, 40));
  throw new HttpError(
    400,
    "invalid_event_id",
    `Cannot resume the run: ${shown} is not an event id of its stream`,
  );
}

/**
 * `GET /v1/sessions/{id}/runs/{run_id}/events` of the caller's own `session`: the run's events after the
 * client's last one (all of them without), each with its id, then the events the table receives, read every
 * `pollMs`, until one is a `run_end` (the run ended, or waits for approval). A client whose last event ended
 * the run gets an empty stream. The stream ends early when the client goes, when the shutdown begins, or after
 * `maxIdleMs` without an event (with an `error` frame, 504 `run_idle`: reconnect to keep waiting). 404 when
 * no event of the run is stored within `firstEventMs` and this process has no such turn waiting or running.
 */
export async function handleRunEvents(
  request: Request,
  run: { session: Session; runId: string },
  deps: HandlerDeps,
): Promise<Response> {
  const { session, runId } = run;
  const trace = deps.trace ?? traceTableOf(deps.store);
  if (trace === null) throw noTraceTable("Cannot follow the run");
  const seen = lastEventId(request);
  const { userId, id: sessionId, createdAt: since } = session;
  const read = (cursor: number | null) =>
    trace.page({ userId, sessionId, since, runId, limit: 1000, cursor });
  const { pollMs = 100, maxIdleMs = 300_000, firstEventMs = 5000 } = deps.follow ?? {};
  const signal = AbortSignal.any([request.signal, deps.shutdownSignal]);
  // The run's first event may still be on its way to the table from the process that runs it.
  let first = await read(null);
  for (let waited = 0; first.events.length === 0 && !deps.sessions.has({ userId, sessionId }, runId);) {
    if (waited >= firstEventMs) {
      const message = `Run "${runId}" of session "${sessionId}" has no events (none stored within ` +
        `${firstEventMs / 1000} s)`;
      throw new HttpError(404, "run_not_found", message);
    }
    await delay(pollMs, signal);
    waited += pollMs;
    first = await read(null);
  }
  const follow = async (send: SseSend) => {
    const ids = new RunEventIds();
    let last: Record<string, unknown> | null = null;
    let page: TracePage = first;
    let cursor: number | null = null;
    for (let idle = 0;;) {
      for (const event of page.events) {
        const text = ids.next(event);
        if (text === null) continue;
        if (seen !== null && !after(parseEventId(text)!, seen)) {
          last = event;
          continue;
        }
        idle = 0;
        send(JSON.stringify(event), event.event as string, text);
        if (event.event === "run_end") return;
      }
      cursor = page.nextCursor ?? page.endCursor ?? cursor;
      if (page.nextCursor === null) {
        if (finished(last)) return;
        if (idle * pollMs >= maxIdleMs) {
          const message = `No event of run "${runId}" for ${
            maxIdleMs / 1000
          } s; reconnect with Last-Event-ID to wait on`;
          return sendErrorFrame(new HttpError(504, "run_idle", message), send);
        }
        await delay(pollMs, signal);
        idle++;
      }
      page = await read(cursor);
    }
  };
  return sseResponse(follow, (error, send) => {
    const failure = toHttpError(error, deps.log, "internal error");
    // The client gone (no frame then) or the shutdown: nobody reads it, or the stream just ends.
    if (!signal.aborted) sendErrorFrame(failure, send);
  });
}
