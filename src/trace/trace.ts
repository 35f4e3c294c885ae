/**
 * The append-only JSONL trace: one run event per line, written as it happens. A trace that cannot be written
 * never fails a turn: the tracer warns once on stderr and stops writing.
 * @module
 */
import { dirname } from "node:path";
import { redact } from "../redact.ts";
import { shorten } from "../shorten.ts";
import type { RunEvent, TracedEvent } from "../events.ts";

/** How a cut string ends: the number of characters cut off. */
function cutMarker(cut: number): string {
  return `…[${cut} more chars]`;
}

/**
 * Cuts every string in `value` to `max` characters (marking the cut) and replaces each secret. What it leaves
 * as it was is handed back as is, not copied: the JSON of the result is the same either way.
 */
export function clip(value: unknown, max: number, secrets: readonly string[] = []): unknown {
  if (typeof value === "string") {
    if (secrets.length === 0 && value.length <= max) return value;
    return shorten(redact(value, secrets), max, { marker: cutMarker });
  }
  if (typeof value !== "object" || value === null) return value;
  if (Array.isArray(value)) {
    let out: unknown[] | undefined;
    for (let i = 0; i < value.length; i++) {
      const item = value[i];
      const cut = clip(item, max, secrets);
      if (out === undefined && cut !== item) out = value.slice(0, i);
      out?.push(cut);
    }
    return out ?? value;
  }
  // Anything but a plain object is copied as its own enumerable fields, which is what its JSON was before
  // (a `toJSON` of its prototype is not called); so is a "__proto__" field, which the copy drops.
  const proto = Object.getPrototypeOf(value);
  const plain = (proto === Object.prototype || proto === null) && !Object.hasOwn(value, "__proto__");
  const entries = Object.entries(value);
  let out: Record<string, unknown> | undefined = plain ? undefined : {};
  for (let i = 0; i < entries.length; i++) {
    const [key, item] = entries[i];
    const cut = clip(item, max, secrets);
    if (out === undefined && cut !== item) {
      out = {};
      for (let j = 0; j < i; j++) out[entries[j][0]] = entries[j][1];
    }
    if (out !== undefined) out[key] = cut;
  }
  return out ?? value;
}

/**
 * Cuts a torn last line off an open trace file so every line is a whole event. Only bytes after the last
 * newline go: each event is appended in one write, so only a crashed writer leaves those. Call it under the
 * file's exclusive lock: a live writer's line is only half there while its write runs (under a shared lock).
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
  /** Longest string kept in an event. @default {2000} */
  maxPayloadChars?: number;
  /** Strings that must never reach the file (the API key); each becomes `[redacted]`. @default {[]} */
  secrets?: string[];
  /**
   * Size past which a line first rotates the file to `<path>.1` (`.1`…`.4` move one up, the old `.5` is
   * deleted), so at most 6 files of about this size exist. @default {64 * 1024 * 1024}
   */
  maxBytes?: number;
  /**
   * Told each event as written (clipped and redacted) with its line's JSON, to ship it on; must not throw.
   * @default {undefined}
   */
  onAppend?: (event: Record<string, unknown>, line: string) => void;
  /** Gets the one warning when the trace cannot be written. @default {(message) => console.error(message)} */
  warn?: (message: string) => void;
}

/** The tracer's buffer for encoding a line; a longer line gets its own array. */
const SCRATCH_BYTES = 16 * 1024;

/** How many rotated files are kept: `<path>.1` (newest) … `<path>.5`. */
export const ROTATED_FILES = 5;

/** The trace files of `path`, oldest first: `<path>.5` … `<path>.1`, `<path>`. */
export function traceFiles(path: string): string[] {
  return [...Array.from({ length: ROTATED_FILES }, (_, i) => `${path}.${ROTATED_FILES - i}`), path];
}

function inodeOf(info: Deno.FileInfo): number {
  // Unix only; without inodes (Windows) every file looks the same and rotation by another process is missed.
  return info.ino ?? 0;
}

/**
 * Writes events to a JSONL file through one handle kept open, rotating it at `maxBytes`. `write` never
 * throws. Several processes may append to one path: each line is one append-mode write under a shared lock
 * of the file, a writer that opens it cuts a torn last line off under an exclusive lock (so never a line
 * still being written), a writer reopens the path when another one rotated it, and rotation happens under
 * an exclusive lock on the old file so two writers never rotate the same file twice.
 * @throws {RangeError} from the constructor when `maxPayloadChars` or `maxBytes` is not positive.
 */
export class JsonlTracer {
  #path: string;
  #options: Required<JsonlTracerOptions>;
  #file: Deno.FsFile | null = null;
  #ino = 0;
  /**
   * How long the file is at least: its size when this writer last looked at the path (before each line,
   * for the inode), plus the line it wrote then. Rotation goes by it, so a write costs no other look at the
   * file; with several writers a file may grow past `maxBytes` by about a line of each before one of them
   * rotates it.
   */
  #end = 0;
  #failed = false;
  #encoder = new TextEncoder();
  /** Lines are encoded into this one buffer: a fresh array per event was memory outside the JS heap. */
  #scratch = new Uint8Array(SCRATCH_BYTES);

  constructor(path: string, options: JsonlTracerOptions = {}) {
    const { maxPayloadChars = 2000, secrets = [], maxBytes = 64 * 1024 * 1024 } = options;
    const { onAppend = () => {}, warn = (message: string) => console.error(message) } = options;
    if (!(maxPayloadChars > 0)) {
      throw new RangeError(`maxPayloadChars must be positive, got ${maxPayloadChars}`);
    }
    if (!(maxBytes > 0)) throw new RangeError(`maxBytes must be positive, got ${maxBytes}`);
    this.#path = path;
    this.#options = { maxPayloadChars, maxBytes, onAppend, warn, secrets: secrets.filter((s) => s !== "") };
  }

  /** Appends one event as one line, in a single write so a crash cannot interleave two events. */
  write(event: RunEvent): void {
    if (this.#failed) return;
    try {
      // Only the data is cut: the envelope (time, ids) stays whole, so readers find the line; both are redacted.
      const { data, ...envelope } = event;
      const { maxPayloadChars, secrets } = this.#options;
      const clipped = {
        ...clip(envelope, Number.POSITIVE_INFINITY, secrets) as Record<string, unknown>,
        data: clip(data, maxPayloadChars, secrets),
      };
      const json = JSON.stringify(clipped);
      const bytes = this.#encode(json + "\n");
      const file = this.#fileFor(bytes.length);
      // Under a shared lock: a process opening the file meanwhile must not take this line for a torn one.
      file.lockSync(false);
      try {
        let written = 0;
        while (written < bytes.length) written += file.writeSync(bytes.subarray(written));
      } finally {
        file.unlockSync();
      }
      // In append mode the line went after whatever was there: the file is at least this long now.
      this.#end += bytes.length;
      this.#options.onAppend(clipped, json);
    } catch (error) {
      this.#failed = true;
      this.#options.warn(
        `warning: cannot write the trace to ${this.#path} (${(error as Error).message}); ` +
          "the run goes on without a trace",
      );
    }
  }

  /** `text` as UTF-8, in the scratch buffer when it fits (valid until the next call). */
  #encode(text: string): Uint8Array {
    // A UTF-16 unit takes at most 3 bytes.
    if (text.length * 3 > this.#scratch.length) return this.#encoder.encode(text);
    return this.#scratch.subarray(0, this.#encoder.encodeInto(text, this.#scratch).written);
  }

  /** Closes the file. Later writes reopen it. */
  close(): void {
    this.#file?.close();
    this.#file = null;
  }

  /**
   * The handle to append `length` bytes to: the path's current file, rotated first if the line would not fit.
   * One look at the path tells both whether another writer rotated the file and how long it has grown.
   */
  #fileFor(length: number): Deno.FsFile {
    if (this.#file !== null) {
      const info = this.#pathInfo();
      if (info === null || inodeOf(info) !== this.#ino) this.close();
      else this.#end = Math.max(this.#end, info.size);
    }
    if (this.#file === null) this.#open();
    if (this.#end > 0 && this.#end + length > this.#options.maxBytes) {
      this.#rotate(length);
      this.close();
      this.#open();
    }
    return this.#file!;
  }

  #open(): void {
    Deno.mkdirSync(dirname(this.#path), { recursive: true });
    const file = Deno.openSync(this.#path, { read: true, append: true, create: true });
    try {
      file.lockSync(true);
      try {
        dropTornTail(file);
      } finally {
        file.unlockSync();
      }
      const info = file.statSync();
      this.#end = info.size;
      this.#ino = inodeOf(info);
    } catch (error) {
      file.close();
      throw error;
    }
    this.#file = file;
  }

  /** What is at the path now, or null when there is no file (another writer is between rename and create). */
  #pathInfo(): Deno.FileInfo | null {
    try {
      return Deno.statSync(this.#path);
    } catch (error) {
      if (error instanceof Deno.errors.NotFound) return null;
      throw error;
    }
  }

  /** Shifts `<path>` → `.1` → … → `.5`, unless another writer rotated this file while we waited for the lock. */
  #rotate(length: number): void {
    const file = this.#file!;
    file.lockSync(true);
    try {
      const info = this.#pathInfo();
      const { maxBytes } = this.#options;
      if (info === null || inodeOf(info) !== this.#ino || file.statSync().size + length <= maxBytes) {
        return;
      }
      for (let i = ROTATED_FILES - 1; i >= 1; i--) {
        try {
          Deno.renameSync(`${this.#path}.${i}`, `${this.#path}.${i + 1}`);
        } catch (error) {
          if (!(error instanceof Deno.errors.NotFound)) throw error;
        }
      }
      Deno.renameSync(this.#path, `${this.#path}.1`);
    } finally {
      file.unlockSync();
    }
  }
}

/**
 * Reads the events of a trace file, oldest first, keeping those `filter` accepts. A torn or malformed line
 * (a crash mid-write) is skipped, never parsed as an event. A missing file reads as no events.
 */
export function readTrace(path: string, filter: (event: TracedEvent) => boolean = () => true): TracedEvent[] {
  let text: string;
  try {
    text = Deno.readTextFileSync(path);
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return [];
    throw error;
  }
  const lines = text.split("\n").map(parseLine) as (TracedEvent | null)[];
  return lines.filter((event): event is TracedEvent => typeof event?.event === "string" && filter(event));
}

/** One line's JSON, or null for an empty or malformed line (a torn write). */
export function parseLine(line: string): unknown {
  if (line === "") return null;
  try {
    return JSON.parse(line);
  } catch {
    return null;
  }
}
