/**
 * Answers as terminal markdown. Rendering goes line by line, and the only thing one line hands to the next
 * is whether a fenced code block is open: so a streamed answer can show each line as it completes and the
 * result is exactly the whole-text rendering.
 * @module
 */
import type { Style } from "./render.ts";
import { displayWidth } from "./_width.ts";

/** Options for `renderMarkdown`. */
export interface MarkdownOptions {
  /** Terminal width in columns; a horizontal rule is drawn this wide, at most 40. @default 80 */
  columns?: number;
}

/** Options for `markdownStream`. */
export interface MarkdownStreamOptions extends MarkdownOptions {
  /**
   * Text put before the first line (e.g. `agent> `); it is redrawn with that line. Since `\r\x1b[2K` clears
   * one terminal row only, a partial line wider than `columns` is shown as it grows only when it is plain
   * prose; otherwise it stays as last drawn until it completes.
   * @default ""
   */
  prefix?: string;
}

/** An answer being rendered as it arrives. */
export interface MarkdownStream {
  /** Adds text; completed lines are written once, the incomplete last line is redrawn in place. */
  push(delta: string): void;
  /** Writes the last line and a newline. Later pushes are ignored. */
  end(): void;
}

type Apply = (text: string) => string;
/** The one state carried across lines: the open code fence, if any. */
interface BlockState {
  fence: { char: string; length: number } | null;
}

/** Clears the current terminal row and returns to its start. */
const CLEAR = "\r\x1b[2K";
// Model text must not move the cursor or restyle the terminal; tabs pass.
// deno-lint-ignore no-control-regex
const CONTROL = /[\x00-\x08\x0a-\x1f\x7f-\x9f]/g;
const PUNCTUATION = /[!-\/:-@\[-`{-~]/;
const WORD = /[\p{L}\p{N}]/u;
const SPACE = /\s/;
const FENCE = /^([ \t]*)(`{3,}|~{3,})(.*)$/;
const RULE = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
const HEADING = /^ {0,3}(#{1,6})(?:[ \t]+(.*))?$/;
const QUOTE = /^ {0,3}>[ ]?(.*)$/;
const BULLET = /^([ \t]*)[-*+][ \t]+(.*)$/;
const NUMBERED = /^([ \t]*)(\d{1,9}[.)])[ \t]+(.*)$/;
/** A partial line no later text can restyle: a letter or digit, and nothing that may open markup. */
const PROSE = /^(?=.*[\p{L}\p{N}])[^*_`~[\]<>\\!#\p{Cc}]*$/u;
// Past these, text is shown as it is: bounds recursion and the quadratic delimiter search.
const MAX_DEPTH = 8;
const MAX_INLINE = 4000;

function runLength(text: string, at: number, char: string): number {
  let end = at;
  while (text[end] === char) end++;
  return end - at;
}

/** Where the next run of exactly `length` backticks starts at or after `from`, or -1. */
function closingTicks(text: string, from: number, length: number): number {
  for (let j = text.indexOf("`", from); j >= 0; j = text.indexOf("`", j + runLength(text, j, "`"))) {
    if (runLength(text, j, "`") === length) return j;
  }
  return -1;
}

/** The emphasis opened at `at` (`*`, `_`, `**`, `__`): its inner text and where it ends, or null. */
function emphasis(text: string, at: number): { inner: string; end: number; strong: boolean } | null {
  const char = text[at];
  const strong = text[at + 1] === char;
  const open = at + (strong ? 2 : 1);
  if (open >= text.length || SPACE.test(text[open])) return null;
  if (char === "_" && WORD.test(text[at - 1] ?? "")) return null;
  for (let j = open + 1; j < text.length; j++) {
    if (text[j] === "`") {
      const ticks = runLength(text, j, "`");
      const close = closingTicks(text, j + ticks, ticks);
      j = close < 0 ? j + ticks - 1 : close + ticks - 1;
      continue;
    }
    if (text[j] !== char) continue;
    const run = runLength(text, j, char);
    const fits = strong ? run >= 2 : run % 2 === 1;
    const flanked = !SPACE.test(text[j - 1]) && !(char === "_" && WORD.test(text[j + run] ?? ""));
    // A longer closing run closes with its last delimiters: `***a***` is strong around `*a*`.
    if (fits && flanked) return { inner: text.slice(open, j + run - (strong ? 2 : 1)), end: j + run, strong };
    j += run - 1;
  }
  return null;
}

/** The `[label](url)` starting at `at`, or null. */
function link(text: string, at: number): { label: string; url: string; end: number } | null {
  let close = -1;
  for (let j = at, depth = 0; j < text.length && close < 0; j++) {
    if (text[j] === "\\") j++;
    else if (text[j] === "[") depth++;
    else if (text[j] === "]" && --depth === 0) close = j;
  }
  if (close < 0 || text[close + 1] !== "(") return null;
  for (let k = close + 2, depth = 1; k < text.length; k++) {
    if (text[k] === "\\") k++;
    else if (text[k] === "(") depth++;
    else if (text[k] === ")" && --depth === 0) {
      const target = text.slice(close + 2, k).trim();
      const url = /^<([^>]*)>/.exec(target)?.[1] ?? target.split(/\s+/)[0];
      return { label: text.slice(at + 1, close), url, end: k + 1 };
    }
  }
  return null;
}

/** Inline markup of one line; `apply` styles each piece with what encloses it (heading, bold, …). */
function inline(text: string, style: Style, apply: Apply, depth = 0): string {
  if (depth > MAX_DEPTH || text.length > MAX_INLINE) return text === "" ? "" : apply(text);
  let out = "";
  let plain = "";
  const put = (rendered: string) => {
    out += (plain === "" ? "" : apply(plain)) + rendered;
    plain = "";
  };
  const nested = (inner: string, wrap: Apply) => inline(inner, style, (s) => apply(wrap(s)), depth + 1);
  for (let i = 0; i < text.length;) {
    const char = text[i];
    if (char === "\\" && PUNCTUATION.test(text[i + 1] ?? "")) {
      plain += text[i + 1];
      i += 2;
      continue;
    }
    if (char === "`") {
      const ticks = runLength(text, i, "`");
      const close = closingTicks(text, i + ticks, ticks);
      if (close < 0) {
        plain += text.slice(i, i + ticks);
        i += ticks;
        continue;
      }
      let code = text.slice(i + ticks, close);
      if (/^ .*[^ ].* $/.test(code)) code = code.slice(1, -1);
      put(code === "" ? "" : apply(style.code(code)));
      i = close + ticks;
      continue;
    }
    const image = char === "!" && text[i + 1] === "[";
    const found = char === "[" || image ? link(text, image ? i + 1 : i) : null;
    if (found !== null) {
      const { label, url } = found;
      const shown = url === "" ? "" : apply(style.dim(style.underline(url)));
      const text = label === url ? "" : inline(label, style, apply, depth + 1);
      put(text === "" || shown === "" ? text + shown : `${text}${apply(" (")}${shown}${apply(")")}`);
      i = found.end;
      continue;
    }
    const auto = char === "<" ? /^<((?:https?|mailto):[^\s<>]+)>/.exec(text.slice(i, i + 2048)) : null;
    if (auto !== null) {
      put(apply(style.underline(auto[1])));
      i += auto[0].length;
      continue;
    }
    const span = char === "*" || char === "_" ? emphasis(text, i) : null;
    if (span !== null) {
      put(nested(span.inner, (s) => span.strong ? style.bold(s) : style.italic(s)));
      i = span.end;
      continue;
    }
    plain += char;
    i++;
  }
  put("");
  return out;
}

/** Block markup of one line outside code fences: rule, heading, quote, list item, or a paragraph line. */
function block(line: string, style: Style, columns: number, depth = 0): string {
  const text = (markdown: string) => inline(markdown, style, (s) => s);
  if (RULE.test(line)) return style.dim("─".repeat(Math.max(3, Math.min(columns, 40))));
  const heading = HEADING.exec(line);
  if (heading !== null) {
    const title = (heading[2] ?? "").replace(/(?:^|[ \t]+)#+[ \t]*$/, "").trim();
    const marks = style.dim(heading[1]);
    return title === "" ? marks : `${marks} ${inline(title, style, (s) => style.heading(s))}`;
  }
  const quote = depth < MAX_DEPTH ? QUOTE.exec(line) : null;
  if (quote !== null) {
    const rest = block(quote[1], style, columns, depth + 1);
    return style.dim("│") + (rest === "" ? "" : ` ${rest}`);
  }
  const bullet = BULLET.exec(line);
  if (bullet !== null) {
    const level = Math.floor(bullet[1].replaceAll("\t", "    ").length / 2);
    return `${bullet[1]}${"•◦▪"[level % 3]} ${text(bullet[2])}`;
  }
  const numbered = NUMBERED.exec(line);
  if (numbered !== null) return `${numbered[1]}${numbered[2]} ${text(numbered[3])}`;
  return text(line);
}

/** Renders one line (without its newline), updating `state` when it opens or closes a code fence. */
function renderLine(raw: string, state: BlockState, style: Style, columns: number): string {
  const line = raw.replace(/\r$/, "").replace(CONTROL, "\uFFFD");
  const fence = FENCE.exec(line);
  if (state.fence !== null) {
    const { char, length } = state.fence;
    if (fence === null || fence[2][0] !== char || fence[2].length < length || fence[3].trim() !== "") {
      return line === "" ? "" : style.codeBlock(line);
    }
    state.fence = null;
    return fence[1] + style.dim(fence[2]);
  }
  // A backtick in a backtick fence's info string makes it inline code instead (CommonMark).
  if (fence !== null && !(fence[2][0] === "`" && fence[3].includes("`"))) {
    state.fence = { char: fence[2][0], length: fence[2].length };
    return fence[1] + style.dim(fence[2] + fence[3]);
  }
  return block(line, style, columns);
}

/**
 * Renders markdown for a terminal: headings, bold, italic, inline code, fenced code blocks, bullet and
 * numbered lists, block quotes, horizontal rules and links (`text (url)`). With identity styles the output
 * has no escape codes. Line breaks are kept as they are; control characters in the text are shown as `�`.
 * Never throws.
 */
export function renderMarkdown(text: string, style: Style, options: MarkdownOptions = {}): string {
  const { columns = 80 } = options;
  const state: BlockState = { fence: null };
  return text.split("\n").map((line) => renderLine(line, state, style, columns)).join("\n");
}

/**
 * Renders markdown that arrives in pieces, through `write`. Each completed line is written once; the
 * incomplete last line is redrawn in place (`\r\x1b[2K` and the line, or only what was added when the
 * rendering just grew). After `end()`, the screen shows `prefix + renderMarkdown(all) + "\n"`. Never throws
 * unless `write` does.
 */
export function markdownStream(
  write: (text: string) => void,
  style: Style,
  options: MarkdownStreamOptions = {},
): MarkdownStream {
  const { columns = 80, prefix = "" } = options;
  const state: BlockState = { fence: null };
  let buffer = "";
  let onRow = ""; // what the current terminal row shows
  let first = true;
  let ended = false;
  const draw = (target: string) => {
    if (target.startsWith(onRow)) {
      if (target.length > onRow.length) write(target.slice(onRow.length));
    } else write(CLEAR + target);
    onRow = target;
  };
  const complete = (line: string) => {
    draw((first ? prefix : "") + renderLine(line, state, style, columns));
    write("\n");
    onRow = "";
    first = false;
  };
  return {
    push(delta: string): void {
      if (ended) return;
      buffer += delta;
      for (let nl = buffer.indexOf("\n"); nl >= 0; nl = buffer.indexOf("\n")) {
        complete(buffer.slice(0, nl));
        buffer = buffer.slice(nl + 1);
      }
      if (buffer === "") return;
      const target = (first ? prefix : "") + renderLine(buffer, { ...state }, style, columns);
      // A line may wrap only while it is prose, whose rendering can but grow: nothing it shows can change.
      if (displayWidth(target) < columns || (state.fence === null && PROSE.test(buffer))) draw(target);
    },
    end(): void {
      if (ended) return;
      ended = true;
      complete(buffer);
      buffer = "";
    },
  };
}
