/**
 * The REPL's line editor: raw-mode keys, a buffer that may span lines (bracketed paste, Alt+Enter, Ctrl+J,
 * `"""` blocks), history on the arrows, Tab completion, and Ctrl-C/Ctrl-D as a shell has them. It works on
 * any readable (a terminal, or an in-memory stream in tests) and redraws the whole entry on each change.
 * @module
 */
import type { Readable, Writable } from "node:stream";
import { type Clock, SYSTEM_CLOCK } from "../clock.ts";
import { type Key, KeyDecoder } from "./keys.ts";
import { type InputHistory, MemoryHistory } from "./history.ts";
import { createStyle, type Style } from "./render.ts";
import { CONTINUATION, drawEntry, PROMPT } from "./_draw.ts";
import { codePointStart, nextBoundary, previousBoundary } from "./_graphemes.ts";
import { displayWidth } from "./_width.ts";

/** A line that is just this starts a block; another ends it, and the lines between are one entry. */
export const BLOCK_FENCE = '"""';
/** Turns bracketed paste on: the terminal then marks pasted text, so a paste is one entry. */
export const PASTE_ON = "\x1b[?2004h";
/** Turns bracketed paste off again. */
export const PASTE_OFF = "\x1b[?2004l";

/** What {@linkcode LineEditor.read} resolves to: an entry, or the user leaving (Ctrl-D, Ctrl-C twice, end). */
export type ReadResult = { kind: "line"; text: string } | { kind: "exit" };

/** A readable that may be a terminal. */
export type EditorInput = Readable & { setRawMode?: (raw: boolean) => unknown };

/** Options of {@linkcode LineEditor}. */
export interface LineEditorOptions {
  /** How the prompts and hints look. @default {createStyle(false)} */
  style?: Style;
  /**
   * Earlier entries, recalled with up and down; each submitted entry is added.
   * @default {new MemoryHistory()}
   */
  history?: InputHistory;
  /** Whole-line completions of the text before the cursor, for Tab. @default {() => []} */
  complete?: (line: string) => string[] | Promise<string[]>;
  /** Milliseconds a lone `\x1b` waits for the rest of a sequence before it is the Esc key. @default {50} */
  escapeDelay?: number;
  /** The wait of `escapeDelay`. @default {SYSTEM_CLOCK} */
  clock?: Clock;
}

/** A raw-mode line editor on `input`, drawing on `output`. Call `start()`, then `read()` per entry. */
export class LineEditor {
  #input: EditorInput;
  #output: Writable;
  #style: Style;
  #history: InputHistory;
  #complete: (line: string) => string[] | Promise<string[]>;
  #escapeDelay: number;
  #clock: Clock;
  /** Ends the wait of `escapeDelay` under way. */
  #escapeWait: AbortController | undefined;
  #decoder = new KeyDecoder();
  #text = new TextDecoder();
  #queue: Key[] = [];
  #waiting: ((result: ReadResult) => void) | null = null;
  #busy = false;
  #ended = false;
  #dirty = false;
  #buffer = "";
  #cursor = 0;
  /** The screen row of the cursor, counted from the entry's first row, as last drawn. */
  #row = 0;
  /** The history entry shown (`entries.length`: the draft), and the draft. */
  #browse = 0;
  #draft = "";
  /** Set by Ctrl-C: another Ctrl-C on an empty line leaves. */
  #armed = false;
  #atLineStart = true;
  /** The prompt of the entry being read. */
  #prompt = PROMPT;
  #onInterrupt: () => void = () => {};
  #onData = (chunk: Uint8Array | string) => this.#receive(chunk);
  #onEnd = () => {
    this.#ended = true;
    void this.#pump();
  };

  constructor(input: EditorInput, output: Writable, options: LineEditorOptions = {}) {
    const { style = createStyle(false), history = new MemoryHistory(), complete = () => [] } = options;
    this.#escapeDelay = options.escapeDelay ?? 50;
    this.#clock = options.clock ?? SYSTEM_CLOCK;
    this.#input = input;
    this.#output = output;
    this.#style = style;
    this.#history = history;
    this.#complete = complete;
  }

  /** Puts the terminal in raw mode with bracketed paste and starts listening. */
  start(): void {
    this.#input.setRawMode?.(true);
    this.#input.on("data", this.#onData);
    this.#input.on("end", this.#onEnd);
    this.#output.write(PASTE_ON);
  }

  /** Calls `handler` for Ctrl-C pressed while no entry is being read (a turn is running). */
  onInterrupt(handler: () => void): void {
    this.#onInterrupt = handler;
  }

  /**
   * Shows the prompt (`you> `, or `prompt`, e.g. an approval's) and resolves with the next entry (keys typed
   * ahead are used first).
   */
  read(prompt: string = PROMPT): Promise<ReadResult> {
    [this.#buffer, this.#cursor, this.#row, this.#draft, this.#armed] = ["", 0, 0, "", false];
    this.#prompt = prompt;
    this.#browse = this.#history.entries.length;
    return new Promise((resolve) => {
      this.#waiting = resolve;
      this.#render();
      void this.#pump();
    });
  }

  /** Clears the screen; the next prompt is drawn at its top. */
  clearScreen(): void {
    this.#write("\x1b[H\x1b[2J");
    this.#row = 0;
  }

  /** Stops listening, restores the terminal, and leaves the cursor at the start of a new line. */
  close(): void {
    this.#input.off("data", this.#onData);
    this.#input.off("end", this.#onEnd);
    this.#escapeWait?.abort();
    this.#input.setRawMode?.(false);
    this.#input.pause();
    this.#write(PASTE_OFF + (this.#atLineStart ? "" : "\r\n"));
  }

  #write(text: string): void {
    this.#output.write(text);
    this.#atLineStart = text.endsWith("\n");
  }

  #receive(chunk: Uint8Array | string): void {
    const text = typeof chunk === "string" ? chunk : this.#text.decode(chunk, { stream: true });
    this.#escapeWait?.abort();
    this.#accept(this.#decoder.push(text));
    if (!this.#decoder.pending) return;
    const wait = this.#escapeWait = new AbortController();
    this.#clock.sleep(this.#escapeDelay, wait.signal).then(
      () => this.#accept(this.#decoder.flush()),
      () => {},
    );
  }

  #accept(keys: Key[]): void {
    for (const key of keys) {
      if (this.#waiting === null && key.name === "interrupt") this.#onInterrupt();
      else this.#queue.push(key);
    }
    void this.#pump();
  }

  async #pump(): Promise<void> {
    if (this.#busy) return;
    this.#busy = true;
    try {
      while (this.#waiting !== null && this.#queue.length > 0) await this.#handle(this.#queue.shift()!);
      if (this.#waiting !== null && this.#ended) this.#finish({ kind: "exit" });
      if (this.#waiting !== null && this.#dirty) this.#render();
    } finally {
      this.#busy = false;
    }
  }

  #finish(result: ReadResult): void {
    const resolve = this.#waiting!;
    this.#waiting = null;
    this.#dirty = false;
    resolve(result);
  }

  async #handle(key: Key): Promise<void> {
    if (key.name !== "interrupt") this.#armed = false;
    this.#dirty = true;
    const b = this.#buffer, c = this.#cursor;
    const lineStart = b.lastIndexOf("\n", c - 1) + 1;
    const lineEnd = b.indexOf("\n", c) === -1 ? b.length : b.indexOf("\n", c);
    const moves: Partial<Record<Key["name"], number>> = { home: lineStart, end: lineEnd };
    [moves.left, moves.right] = [previousBoundary(b, c), nextBoundary(b, c)];
    if (moves[key.name] !== undefined) return void (this.#cursor = moves[key.name]!);
    switch (key.name) {
      case "text":
      case "paste":
        return this.#insert(key.text.replace(/\r\n?/g, "\n"));
      case "newline":
        return this.#insert("\n");
      case "enter":
        return this.#enter();
      case "backspace":
        [this.#buffer, this.#cursor] = [b.slice(0, moves.left) + b.slice(c), moves.left];
        return;
      case "eof":
        if (b === "") return this.#finish({ kind: "exit" });
        /* falls through: Ctrl-D on a line deletes, as Delete does */
      case "delete":
        this.#buffer = b.slice(0, c) + b.slice(moves.right);
        return;
      case "kill":
        [this.#buffer, this.#cursor] = [b.slice(0, lineStart) + b.slice(c), lineStart];
        return;
      case "up":
      case "down":
        return this.#vertical(key.name === "up" ? -1 : 1);
      case "tab":
        return await this.#tab();
      case "clear":
        return this.clearScreen();
      case "interrupt":
        return this.#interrupt();
    }
  }

  #insert(text: string): void {
    this.#buffer = this.#buffer.slice(0, this.#cursor) + text + this.#buffer.slice(this.#cursor);
    this.#cursor += text.length;
  }

  /** Draws the entry with the cursor at its end and moves to a new line, as the entry is done with. */
  #leaveEntry(after = ""): void {
    this.#cursor = this.#buffer.length;
    this.#render();
    this.#write(`${after}\r\n`);
    this.#row = 0;
    this.#dirty = true;
  }

  #enter(): void {
    const lines = this.#buffer.split("\n");
    const fenced = lines[0].trim() === BLOCK_FENCE;
    if (fenced && (lines.length === 1 || lines.at(-1)!.trim() !== BLOCK_FENCE)) {
      this.#cursor = this.#buffer.length;
      return this.#insert("\n");
    }
    const text = fenced ? lines.slice(1, -1).join("\n") : this.#buffer;
    this.#leaveEntry();
    // Only what was typed at `you> ` is worth recalling, not an approval's "y".
    if (this.#prompt === PROMPT) this.#history.add(text);
    this.#finish({ kind: "line", text });
  }

  #interrupt(): void {
    if (this.#buffer === "" && this.#armed) return this.#finish({ kind: "exit" });
    const hint = this.#buffer === "" ? this.#style.dim(" (Ctrl-C again or Ctrl-D to exit)") : "";
    this.#leaveEntry(`^C${hint}`);
    this.#buffer = "";
    this.#cursor = 0;
    this.#browse = this.#history.entries.length;
    this.#armed = true;
  }

  /** Up and down move between the entry's lines, and past its first or last line through the history. */
  #vertical(direction: 1 | -1): void {
    const lines = this.#buffer.split("\n");
    const before = this.#buffer.slice(0, this.#cursor);
    const line = before.split("\n").length - 1;
    const target = line + direction;
    if (target >= 0 && target < lines.length) {
      const column = this.#cursor - (before.lastIndexOf("\n") + 1);
      const start = lines.slice(0, target).reduce((sum, l) => sum + l.length + 1, 0);
      this.#cursor = codePointStart(this.#buffer, start + Math.min(column, lines[target].length));
      return;
    }
    const entries = this.#history.entries;
    const next = this.#browse + direction;
    if (next < 0 || next > entries.length) return;
    if (this.#browse === entries.length) this.#draft = this.#buffer;
    this.#browse = next;
    this.#buffer = next === entries.length ? this.#draft : entries[next];
    this.#cursor = this.#buffer.length;
  }

  async #tab(): Promise<void> {
    const line = this.#buffer.slice(0, this.#cursor);
    const candidates = await this.#complete(line);
    if (candidates.length === 0) return;
    const common = candidates.reduce((prefix, c) => {
      let n = 0;
      while (n < prefix.length && prefix[n] === c[n]) n++;
      return prefix.slice(0, n);
    });
    if (common.length > line.length) {
      this.#buffer = common + this.#buffer.slice(this.#cursor);
      this.#cursor = common.length;
    } else if (candidates.length > 1) {
      const rest = this.#buffer;
      this.#leaveEntry();
      const names = candidates.map((c) => c.trimEnd().slice(c.trimEnd().lastIndexOf(" ") + 1));
      this.#write(`${this.#style.dim(names.join("  "))}\r\n`);
      [this.#buffer, this.#cursor] = [rest, line.length];
    }
  }

  /** Redraws the entry from its first row and puts the cursor where it belongs. */
  #render(): void {
    const columns = (this.#output as { columns?: number }).columns;
    const width = columns !== undefined && columns > 0 ? columns : 80;
    // Further lines are marked as wide as the first line's prompt: `...> ` under `you> `.
    const promptWidth = displayWidth(this.#prompt);
    const continuation = this.#prompt === PROMPT ? CONTINUATION : `${".".repeat(promptWidth - 2)}> `;
    const prompts: [string, string] = [this.#style.bold(this.#prompt), this.#style.bold(continuation)];
    const drawn = drawEntry(this.#buffer, this.#cursor, { fromRow: this.#row, width, prompts, promptWidth });
    this.#row = drawn.row;
    this.#dirty = false;
    this.#write(drawn.text);
  }
}
