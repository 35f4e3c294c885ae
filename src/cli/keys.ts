/**
 * Turns the bytes a terminal sends in raw mode into keys: printable text, a bracketed paste, control keys and
 * the escape sequences of arrows, Home, End and Delete. Pure and incremental: a sequence split across chunks
 * is completed by the next one.
 * @module
 */

/** A key the line editor acts on; `text` is a run of printable characters, `paste` a whole bracketed paste. */
export type Key =
  | { name: "text" | "paste"; text: string }
  | {
    name:
      | "enter"
      | "newline"
      | "backspace"
      | "delete"
      | "left"
      | "right"
      | "up"
      | "down"
      | "home"
      | "end"
      | "tab"
      | "interrupt"
      | "eof"
      | "clear"
      | "kill"
      | "escape";
  };

/** The name of a key without text. */
export type KeyName = Exclude<Key, { text: string }>["name"];

/** What a terminal wraps around pasted text once bracketed paste is on (`\x1b[?2004h`). */
export const PASTE_START = "\x1b[200~";
/** The end of a bracketed paste. */
export const PASTE_END = "\x1b[201~";

const CONTROL: Record<string, KeyName> = {
  "\r": "enter",
  "\n": "newline", // Ctrl+J
  "\t": "tab",
  "\x7f": "backspace",
  "\x08": "backspace",
  "\x01": "home", // Ctrl+A
  "\x05": "end", // Ctrl+E
  "\x02": "left", // Ctrl+B
  "\x06": "right", // Ctrl+F
  "\x10": "up", // Ctrl+P
  "\x0e": "down", // Ctrl+N
  "\x03": "interrupt", // Ctrl+C
  "\x04": "eof", // Ctrl+D
  "\x0c": "clear", // Ctrl+L
  "\x15": "kill", // Ctrl+U
};

/** The final byte (with its parameter, for `~` sequences) of a CSI or SS3 sequence, and the key it is. */
const SEQUENCES: Record<string, KeyName> = {
  A: "up",
  B: "down",
  C: "right",
  D: "left",
  H: "home",
  F: "end",
  "1~": "home",
  "7~": "home",
  "4~": "end",
  "8~": "end",
  "3~": "delete",
};

/** Decodes a terminal's input stream into keys; feed it each chunk as it arrives. */
export class KeyDecoder {
  #pending = "";
  #paste: string | null = null;

  /** The keys completed by `chunk`; an unfinished escape sequence or paste waits for the next chunk. */
  push(chunk: string): Key[] {
    const s = this.#pending + chunk;
    this.#pending = "";
    const keys: Key[] = [];
    let i = 0;
    while (i < s.length) {
      if (this.#paste !== null) {
        const end = s.indexOf(PASTE_END, i);
        if (end === -1) {
          // Keep what may be the start of the end marker for the next chunk.
          const keep = partialSuffix(s.slice(i), PASTE_END);
          this.#paste += s.slice(i, s.length - keep);
          this.#pending = s.slice(s.length - keep);
          return keys;
        }
        keys.push({ name: "paste", text: this.#paste + s.slice(i, end) });
        this.#paste = null;
        i = end + PASTE_END.length;
        continue;
      }
      const c = s[i];
      if (c === "\x1b") {
        const step = this.#escape(s, i, keys);
        if (step === 0) {
          this.#pending = s.slice(i);
          return keys;
        }
        i += step;
      } else if (c < " " || c === "\x7f") {
        const name = CONTROL[c];
        if (name !== undefined) keys.push({ name });
        i++;
      } else {
        let j = i;
        while (j < s.length && s[j] >= " " && s[j] !== "\x7f") j++;
        keys.push({ name: "text", text: s.slice(i, j) });
        i = j;
      }
    }
    return keys;
  }

  /** Whether an escape sequence is waiting for its next chunk: a lone Esc key does not send one. */
  get pending(): boolean {
    return this.#paste === null && this.#pending !== "";
  }

  /**
   * Ends the escape sequence that is waiting, for when no more input came soon enough (Esc itself sends
   * only `\x1b`): a lone `\x1b` is the Escape key, anything longer an unbound Alt+key, dropped. A paste
   * still waiting for its end marker is kept.
   */
  flush(): Key[] {
    if (!this.pending) return [];
    const keys: Key[] = this.#pending === "\x1b" ? [{ name: "escape" }] : [];
    this.#pending = "";
    return keys;
  }

  /** Decodes the escape sequence at `s[i]`; returns its length, or 0 when it is not complete yet. */
  #escape(s: string, i: number, keys: Key[]): number {
    const next = s[i + 1];
    if (next === undefined) return 0;
    if (next === "\x1b") {
      keys.push({ name: "escape" }); // the second Esc starts a new sequence
      return 1;
    }
    if (next === "\r" || next === "\n") {
      keys.push({ name: "newline" }); // Alt+Enter
      return 2;
    }
    if (next !== "[" && next !== "O") return 1 + String.fromCodePoint(s.codePointAt(i + 1)!).length; // Alt+key
    // Parameter bytes, intermediate bytes, a final byte (ECMA-48).
    const match = /^[0-?]*[ -/]*[@-~]/.exec(s.slice(i + 2));
    if (match === null) return /^[0-?]*[ -/]*$/.test(s.slice(i + 2)) ? 0 : 2;
    const body = match[0];
    if (`\x1b[${body}` === PASTE_START) {
      this.#paste = "";
      return 2 + body.length;
    }
    const [params, final] = [body.slice(0, -1), body.at(-1)!];
    if (/^[0-9;]*$/.test(params)) {
      const name = final === "~" ? SEQUENCES[`${params.split(";")[0]}~`] : SEQUENCES[final];
      if (name !== undefined) keys.push({ name });
    }
    return 2 + body.length; // unknown sequences are ignored
  }
}

/** How many characters at the end of `text` are a proper prefix of `marker`. */
function partialSuffix(text: string, marker: string): number {
  for (let n = Math.min(marker.length - 1, text.length); n > 0; n--) {
    if (marker.startsWith(text.slice(text.length - n))) return n;
  }
  return 0;
}
