/**
 * The one Server-Sent Events writer of the HTTP routes: a response whose frames a producer writes while it
 * runs, closed when the producer settles, and quiet once the client has gone.
 * @module
 */
import type { HttpError } from "./errors.ts";

/**
 * Writes one frame: `data` (one line: JSON or a marker such as `[DONE]`), with an `event:` line if named and an
 * `id:` line if given (the id a client sends back as `Last-Event-ID` to resume after it). False when it was
 * dropped: the client has gone or was let go.
 */
export type SseSend = (data: string, event?: string, id?: string) => boolean;

/**
 * Sends `error` as an `error` frame, `{"error": {code, message, …, status}}`, the body of the status a JSON
 * answer would have had; none for a client gone (499), which is routine: nobody reads it.
 */
export function sendErrorFrame(error: HttpError, send: SseSend): void {
  if (error.status !== 499) {
    send(JSON.stringify({ error: { ...error.body(), status: error.status } }), "error");
  }
}

/** The headers of every SSE response: no caching, and no buffering in a reverse proxy. */
export const SSE_HEADERS: Readonly<Record<string, string>> = Object.freeze({
  "content-type": "text/event-stream; charset=utf-8",
  "cache-control": "no-cache",
  "x-accel-buffering": "no",
});

/** Bytes of frames a response holds for a client that does not read them before it cuts the client off. */
export const MAX_UNREAD_SSE_BYTES = 1_048_576;

/** Options of {@linkcode sseResponse}. */
export interface SseResponseOptions {
  /** Frames held for a client that stops reading, in bytes, past which it is cut. @default {MAX_UNREAD_SSE_BYTES} */
  maxUnreadBytes?: number;
}

/**
 * A 200 SSE response whose body is what `produce` sends. A rejection of `produce` goes to `onError` (which may
 * still send, say an error frame); the stream closes after either. Once the client cancels the body, sends
 * are dropped: the route learns of the disconnect from `request.signal`. A client that stops reading is
 * held at most `maxUnreadBytes` of frames (and the frame that crossed them): then its stream ends in an error,
 * the frames held are freed and later sends are dropped, while the work goes on (a turn ends and is kept as
 * if its client had stayed). `headers` go with `SSE_HEADERS`.
 */
export function sseResponse(
  produce: (send: SseSend) => Promise<void>,
  onError: (error: unknown, send: SseSend) => void,
  headers: Record<string, string> = {},
  options: SseResponseOptions = {},
): Response {
  const { maxUnreadBytes = MAX_UNREAD_SSE_BYTES } = options;
  const encoder = new TextEncoder();
  let open = true;
  const stream = new ReadableStream<Uint8Array>({
    start(controller) {
      // `data` is a single line, so no payload can break the framing.
      const send: SseSend = (data, event, id) => {
        const named = event === undefined ? "" : `event: ${event}\n`;
        const frame = `${id === undefined ? "" : `id: ${id}\n`}${named}data: ${data}\n\n`;
        if (!open) return false;
        // The queue holds what the client has not read. Over the bound (by at most the frame that crossed
        // it), the client is let go: a turn is never buffered whole for a client that stopped reading.
        if ((controller.desiredSize ?? 0) < 0) {
          open = false;
          controller.error(new Error(`the client left over ${maxUnreadBytes} bytes of frames unread`));
          return false;
        }
        controller.enqueue(encoder.encode(frame));
        return true;
      };
      produce(send).catch((error) => onError(error, send)).finally(() => {
        if (open) controller.close();
        open = false;
      });
    },
    cancel() {
      // The client went away; request.signal aborts the work (a write to the closed stream makes Deno see it
      // even when the request's body came after its headers).
      open = false;
    },
  }, new ByteLengthQueuingStrategy({ highWaterMark: maxUnreadBytes }));
  return new Response(stream, { headers: { ...SSE_HEADERS, ...headers } });
}
