/**
 * The server's log lines, written in batches: every write to a pipe wakes its reader, which on a small machine
 * costs more than serving a small request. (The trace, the record, is written as each event happens.)
 * @module
 */

/** How long a line may wait before it is written, in milliseconds. */
export const LOG_FLUSH_MS = 100;
/** Buffered characters that make the log write at once. */
export const LOG_MAX_BUFFERED_CHARS = 16_384;

/** Options of {@linkcode BatchedLog}. */
export interface BatchedLogOptions {
  /** @default {LOG_FLUSH_MS} */
  flushMs?: number;
  /** @default {LOG_MAX_BUFFERED_CHARS} */
  maxBufferedChars?: number;
}

/**
 * Lines in order, written in batches: a line waits at most `flushMs` or until `maxBufferedChars` are buffered;
 * an urgent one goes out at once with those before it. The timer never keeps the process alive: `close()`
 * before exiting. A failing `write` drops its batch: the log never fails the request that logged.
 */
export class BatchedLog {
  #write: (text: string) => void;
  #flushMs: number;
  #maxBufferedChars: number;
  #lines: string[] = [];
  #chars = 0;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #closed = false;

  constructor(write: (text: string) => void, options: BatchedLogOptions = {}) {
    const { flushMs = LOG_FLUSH_MS, maxBufferedChars = LOG_MAX_BUFFERED_CHARS } = options;
    if (!(flushMs > 0)) throw new RangeError(`flushMs must be positive, got ${flushMs}`);
    if (!(maxBufferedChars > 0)) {
      throw new RangeError(`maxBufferedChars must be positive, got ${maxBufferedChars}`);
    }
    this.#write = write;
    this.#flushMs = flushMs;
    this.#maxBufferedChars = maxBufferedChars;
  }

  /** Buffers one line (without its newline); an `urgent` one is written at once, after those buffered. */
  line(text: string, urgent = false): void {
    this.#lines.push(text);
    this.#chars += text.length + 1;
    if (urgent || this.#closed || this.#chars >= this.#maxBufferedChars) {
      this.flush();
      return;
    }
    if (this.#timer === undefined) {
      this.#timer = setTimeout(() => {
        this.#timer = undefined;
        this.flush();
      }, this.#flushMs);
      Deno.unrefTimer(this.#timer);
    }
  }

  /** Writes every buffered line now, in one write. */
  flush(): void {
    if (this.#timer !== undefined) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
    }
    if (this.#lines.length === 0) return;
    const text = this.#lines.join("\n") + "\n";
    this.#lines = [];
    this.#chars = 0;
    try {
      this.#write(text);
    } catch {
      // Nowhere left to say it: the log is for people, and the request already has its answer.
    }
  }

  /** Flushes; from now on each line is written at once. */
  close(): void {
    this.flush();
    this.#closed = true;
  }
}

const encoder = new TextEncoder();

/** Writes all of `text` to stderr, synchronously. */
export function writeStderr(text: string): void {
  const bytes = encoder.encode(text);
  let written = 0;
  while (written < bytes.length) written += Deno.stderr.writeSync(bytes.subarray(written));
}
