/**
 * An incremental Server-Sent Events parser (the WHATWG "event stream" format) for a byte stream that may be
 * cut anywhere: inside a line, inside a multi-byte UTF-8 character, between the `\r` and `\n` of a line end.
 * Pure: bytes in, events out; the caller does the reading, its deadlines and its cancellation.
 * @module
 */

/** One dispatched event. */
export interface SseEvent {
  /** The last `event:` field of the event; `null` when it had none (the spec's default type "message"). */
  event: string | null;
  /** Its `data:` fields joined with `\n`. */
  data: string;
}

/** Options of {@linkcode SseParser} and {@linkcode readSseEvents}. */
export interface SseParserOptions {
  /**
   * Dispatch the pending event when the stream ends without its terminating blank line (even without the
   * final line end). The spec drops it, but OpenAI-compatible servers sometimes close right after their
   * last `data: [DONE]` line, and dropping that would turn a complete answer into an error.
   * @default {true}
   */
  dispatchAtEnd?: boolean;
}

const LINE_END = /\r\n|\r|\n/g;

/**
 * Parses an event stream pushed to it in arbitrary byte chunks.
 *
 * Lines end with `\r\n`, `\r` or `\n`; a blank line dispatches the event; `:` starts a comment; a field's
 * value loses one space after the colon (`data:x` and `data: x` are the same); several `data:` lines join
 * with `\n`; a line without a colon is a field with an empty value; `event:` names the event; `id:`,
 * `retry:` and unknown fields are ignored; an event without data is not dispatched. A leading BOM is
 * dropped. Never throws; invalid UTF-8 becomes U+FFFD.
 */
export class SseParser {
  #decoder = new TextDecoder("utf-8");
  #dispatchAtEnd: boolean;
  /** The text after the last line end: never contains `\r` or `\n`. */
  #partial = "";
  /** The last text ended with `\r`: a `\n` starting the next text belongs to that line end. */
  #skipLineFeed = false;
  #eventType = "";
  #data: string[] = [];
  #ended = false;

  constructor(options: SseParserOptions = {}) {
    const { dispatchAtEnd = true } = options;
    this.#dispatchAtEnd = dispatchAtEnd;
  }

  /** Feeds the next bytes; returns the events they completed, in order. */
  push(bytes: Uint8Array): SseEvent[] {
    if (this.#ended) throw new TypeError("Cannot push to SseParser: the stream has already ended");
    return this.#feed(this.#decoder.decode(bytes, { stream: true }));
  }

  /** Ends the stream; returns the events still pending (see `dispatchAtEnd`). Later calls return none. */
  end(): SseEvent[] {
    if (this.#ended) return [];
    const events = this.#feed(this.#decoder.decode());
    this.#ended = true;
    if (!this.#dispatchAtEnd) return events;
    if (this.#partial !== "") this.#line(this.#partial, events);
    this.#partial = "";
    this.#dispatch(events);
    return events;
  }

  #feed(text: string): SseEvent[] {
    const events: SseEvent[] = [];
    if (text === "") return events;
    let from = 0;
    if (this.#skipLineFeed) {
      this.#skipLineFeed = false;
      if (text.startsWith("\n")) from = 1;
    }
    const buffer = this.#partial + text.slice(from);
    // `#partial` holds no line end, so the search can start where the new text does.
    LINE_END.lastIndex = this.#partial.length;
    let start = 0;
    for (let match = LINE_END.exec(buffer); match !== null; match = LINE_END.exec(buffer)) {
      this.#line(buffer.slice(start, match.index), events);
      start = match.index + match[0].length;
      if (match[0] === "\r" && start === buffer.length) this.#skipLineFeed = true;
    }
    this.#partial = buffer.slice(start);
    return events;
  }

  #line(line: string, events: SseEvent[]): void {
    if (line === "") return this.#dispatch(events);
    if (line.startsWith(":")) return;
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") this.#data.push(value);
    else if (field === "event") this.#eventType = value;
    // `id` and `retry` only matter to a reconnecting EventSource; a chat completion is never resumed.
  }

  #dispatch(events: SseEvent[]): void {
    if (this.#data.length > 0) {
      events.push({ event: this.#eventType === "" ? null : this.#eventType, data: this.#data.join("\n") });
    }
    this.#data = [];
    this.#eventType = "";
  }
}

/**
 * The events of an event-stream body, as they complete. Reads `body` to its end (or until the consumer
 * stops) and always cancels it on the way out, so an early `break` frees the connection. Rejects only with
 * the body's own read error.
 */
export async function* readSseEvents(
  body: ReadableStream<Uint8Array>,
  options: SseParserOptions = {},
): AsyncGenerator<SseEvent> {
  const parser = new SseParser(options);
  const reader = body.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      yield* parser.push(value);
    }
    yield* parser.end();
  } finally {
    // A no-op on a finished body; on an errored one it rejects with the error already being thrown.
    await reader.cancel().catch(() => {});
  }
}
