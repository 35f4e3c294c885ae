/**
 * The server's log lines, written in batches: every write to a pipe wakes its reader, which on a small
 * machine costs more than serving a small request. (The trace, the record, is written as each event happens.)
 * @module
 */

/** Options of {@linkcode BatchedLog}. */
export interface BatchedLogOptions {
  /** How long a line may wait before it is written, in milliseconds. @default {100} */
  flushMs?: number;
  /** Buffered characters that make the log write at once. @default {16_384} */
  maxBufferedChars?: number;
}

/**
 * Lines in order, written in batches: a line waits at most `flushMs` or until `maxBufferedChars` are
 * buffered; an urgent one goes out at once with those before it. The timer never keeps the process alive:
 * `close()` before exiting. A failing `write` drops its batch: the log never fails the request that logged.
 * @throws {RangeError} from the constructor when `flushMs` or `maxBufferedChars` is not positive.
 */
export class BatchedLog {
  #write: (text: string) => void;
  #options: Required<BatchedLogOptions>;
  #lines: string[] = [];
  #chars = 0;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #closed = false;

  constructor(write: (text: string) => void, options: BatchedLogOptions = {}) {
    const { flushMs = 100, maxBufferedChars = 16_384 } = options;
    if (!(flushMs > 0)) throw new RangeError(`flushMs must be positive, got ${flushMs}`);
    if (!(maxBufferedChars > 0)) {
      throw new RangeError(`maxBufferedChars must be positive, got ${maxBufferedChars}`);
    }
    this.#write = write;
    this.#options = { flushMs, maxBufferedChars };
  }

  /** Buffers one line (without its newline); an `urgent` one is written at once, after those buffered. */
  line(text: string, urgent = false): void {
    this.#lines.push(text);
    this.#chars += text.length + 1;
    if (urgent || this.#closed || this.#chars >= this.#options.maxBufferedChars) return this.flush();
    if (this.#timer !== undefined) return;
    this.#timer = setTimeout(() => this.flush(), this.#options.flushMs);
    Deno.unrefTimer(this.#timer);
  }

  /** Writes every buffered line now, in one write. */
  flush(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
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
