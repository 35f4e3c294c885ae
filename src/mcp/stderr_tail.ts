/**
 * StderrTail: the last lines a stdio server wrote to its stderr, bounded and redacted as they come, so a
 * server that dies at start can say why ("missing token") where the client only saw "Connection closed".
 * @module
 */
import { redact } from "../redact.ts";

/** Lines kept, the last ones. */
export const STDERR_LINES = 20;
/** Characters kept in all, the last ones. */
export const STDERR_CHARS = 4096;
/** A secret shorter than this is not taken out: a flag value like `1` or `true` would blot out every line. */
const MIN_SECRET_CHARS = 6;

/** Escape codes (colours, cursor moves) and other control characters are not for a log line. */
// deno-lint-ignore no-control-regex
const ESCAPE_CODE = /\x1b\[[0-9;?]*[ -\/]*[@-~]/g;
// deno-lint-ignore no-control-regex
const CONTROL = /[\x00-\x08\x0b-\x1f\x7f]/g;

/** Options of {@linkcode StderrTail}. */
export interface StderrTailOptions {
  /** Values that must not appear (the entry's env values and what it took from the environment). @default {[]} */
  secrets?: readonly string[];
  /** How many last lines are kept. @default {STDERR_LINES} */
  maxLines?: number;
  /** How many characters are kept in all, counted over the kept lines. @default {STDERR_CHARS} */
  maxChars?: number;
}

/** Receives a child's stderr bytes; keeps its last lines, each redacted, without escape codes. Never throws. */
export class StderrTail {
  #decoder = new TextDecoder();
  #pending = "";
  #lines: string[] = [];
  #secrets: readonly string[];
  #maxLines: number;
  #maxChars: number;

  constructor(options: StderrTailOptions = {}) {
    const { secrets = [], maxLines = STDERR_LINES, maxChars = STDERR_CHARS } = options;
    if (!Number.isInteger(maxLines) || maxLines < 1) {
      throw new RangeError(`maxLines must be 1 or more, got ${maxLines}`);
    }
    if (!Number.isInteger(maxChars) || maxChars < 1) {
      throw new RangeError(`maxChars must be 1 or more, got ${maxChars}`);
    }
    // Longest first: a secret that holds another is taken out whole.
    this.#secrets = secrets.filter((secret) => secret.length >= MIN_SECRET_CHARS)
      .toSorted((a, b) => b.length - a.length);
    this.#maxLines = maxLines;
    this.#maxChars = maxChars;
  }

  /** Takes the next bytes of the stream. */
  push(chunk: Uint8Array): void {
    this.#pending += this.#decoder.decode(chunk, { stream: true });
    let newline: number;
    while ((newline = this.#pending.indexOf("\n")) !== -1) {
      this.#keep(this.#pending.slice(0, newline));
      this.#pending = this.#pending.slice(newline + 1);
    }
    // A line that never ends is kept in pieces, so memory stays bounded.
    while (this.#pending.length > this.#maxChars) {
      this.#keep(this.#pending.slice(0, this.#maxChars));
      this.#pending = this.#pending.slice(this.#maxChars);
    }
  }

  /** The stream ended: its last line, without a newline, is kept too. */
  end(): void {
    this.#pending += this.#decoder.decode();
    if (this.#pending !== "") this.#keep(this.#pending);
    this.#pending = "";
  }

  /** The kept lines, oldest first (a line still being written is not among them until `end`). */
  lines(): readonly string[] {
    return [...this.#lines];
  }

  #keep(raw: string): void {
    const line = redact(
      raw.replace(ESCAPE_CODE, "").replace(CONTROL, "").trimEnd(),
      this.#secrets,
      { tokenLike: true },
    );
    if (line.trim() === "") return;
    this.#lines.push(line.length > this.#maxChars ? line.slice(-this.#maxChars) : line);
    if (this.#lines.length > this.#maxLines) this.#lines.shift();
    let chars = this.#lines.reduce((sum, kept) => sum + kept.length, 0);
    while (chars > this.#maxChars && this.#lines.length > 1) chars -= this.#lines.shift()!.length;
  }
}
