/**
 * The append-only JSONL trace: one run event per line, written as it happens. A trace that cannot be written
 * never fails a turn: the tracer warns once on stderr and stops writing.
 * @module
 */
import { dirname } from "node:path";
import type { RunEvent } from "./types.ts";

/** Cuts every string in `value` to `max` characters (marking the cut) and replaces each secret. */
export function clip(value: unknown, max: number, secrets: readonly string[] = []): unknown {
  if (typeof value === "string") {
    let text = value;
    for (const secret of secrets) if (secret !== "") text = text.replaceAll(secret, "[redacted]");
    return text.length > max ? `${text.slice(0, max)}…[${text.length - max} more chars]` : text;
  }
  if (Array.isArray(value)) return value.map((item) => clip(item, max, secrets));
  if (typeof value === "object" && value !== null) {
    const out: Record<string, unknown> = {};
    for (const [key, item] of Object.entries(value)) out[key] = clip(item, max, secrets);
    return out;
  }
  return value;
}

/**
 * Cuts a torn last line (a crash inside a write) off an open trace file, so the next event starts on a line
 * of its own and every line of the file is a whole event. Only bytes after the last newline go: those can
 * only be a crashed writer's, since each event is appended in one write.
 */
function dropTornTail(file: Deno.FsFile): void {
  const size = file.statSync().size;
  const chunk = new Uint8Array(64 * 1024);
  for (let end = size; end > 0;) {
    const start = Math.max(0, end - chunk.length);
    const view = chunk.subarray(0, end - start);
    file.seekSync(start, Deno.SeekMode.Start);
    let read = 0;
    while (read < view.length) read += file.readSync(view.subarray(read)) ?? view.length;
    const newline = view.lastIndexOf(0x0a);
    if (newline !== -1) {
      if (start + newline + 1 < size) file.truncateSync(start + newline + 1);
      return;
    }
    end = start;
  }
  if (size > 0) file.truncateSync(0);
}

/** Options of {@linkcode JsonlTracer}. */
export interface JsonlTracerOptions {
  /**
   * Longest string kept in an event.
   * @default {2000}
   */
  maxPayloadChars?: number;
  /**
   * Strings that must never reach the file (the API key); each occurrence becomes `[redacted]`.
   * @default {[]}
   */
  secrets?: string[];
  /**
   * Where the one warning goes when the trace cannot be written.
   * @default {(message) => console.error(message)}
   */
  warn?: (message: string) => void;
}

/** Writes events to a JSONL file through one handle kept open. `write` never throws. */
export class JsonlTracer {
  #path: string;
  #maxPayloadChars: number;
  #secrets: string[];
  #warn: (message: string) => void;
  #file: Deno.FsFile | null = null;
  #failed = false;
  #encoder = new TextEncoder();

  constructor(path: string, options: JsonlTracerOptions = {}) {
    const { maxPayloadChars = 2000, secrets = [], warn = (message) => console.error(message) } = options;
    if (!(maxPayloadChars > 0)) {
      throw new RangeError(`maxPayloadChars must be positive, got ${maxPayloadChars}`);
    }
    this.#path = path;
    this.#maxPayloadChars = maxPayloadChars;
    this.#secrets = secrets.filter((secret) => secret !== "");
    this.#warn = warn;
  }

  /** Appends one event as one line, in a single write so a crash cannot interleave two events. */
  write(event: RunEvent): void {
    if (this.#failed) return;
    try {
      if (this.#file === null) {
        Deno.mkdirSync(dirname(this.#path), { recursive: true });
        this.#file = Deno.openSync(this.#path, { read: true, append: true, create: true });
        dropTornTail(this.#file);
      }
      const line = JSON.stringify(clip(event, this.#maxPayloadChars, this.#secrets)) + "\n";
      const bytes = this.#encoder.encode(line);
      let written = 0;
      while (written < bytes.length) written += this.#file.writeSync(bytes.subarray(written));
    } catch (error) {
      this.#failed = true;
      this.#warn(
        `warning: cannot write the trace to ${this.#path} (${(error as Error).message}); ` +
          "the run goes on without a trace",
      );
    }
  }

  /** Closes the file. Later writes reopen it. */
  close(): void {
    this.#file?.close();
    this.#file = null;
  }
}

/**
 * Reads the events of a trace file, oldest first, keeping those `filter` accepts. A torn or malformed line
 * (a crash mid-write) is skipped, never parsed as an event. A missing file reads as no events.
 */
export function readTrace(path: string, filter: (event: RunEvent) => boolean = () => true): RunEvent[] {
  let text: string;
  try {
    text = Deno.readTextFileSync(path);
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return [];
    throw error;
  }
  const events: RunEvent[] = [];
  for (const line of text.split("\n")) {
    if (line === "") continue;
    let event: RunEvent;
    try {
      event = JSON.parse(line);
    } catch {
      continue;
    }
    if (typeof event === "object" && event !== null && typeof event.event === "string" && filter(event)) {
      events.push(event);
    }
  }
  return events;
}
