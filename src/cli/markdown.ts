/**
 * Answers as terminal markdown: the tree of the one markdown parser (`src/text/markdown.js`, which the web page
 * renders as DOM nodes) drawn as styled text. The tree has a node per line and parsing hands only the open
 * code fence from one line to the next: so a streamed answer can show each line as it completes and the
 * result is exactly the whole-text rendering.
 * @module
 */
import type { Style } from "./render.ts";
import { displayWidth } from "./_width.ts";
import {
  type FenceState,
  type MarkdownInline,
  type MarkdownLine,
  newFenceState,
  parseLine,
  parseMarkdown,
} from "../text/markdown.js";

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

/** Clears the current terminal row and returns to its start. */
const CLEAR = "\r\x1b[2K";
/** A partial line no later text can restyle: a letter or digit, and nothing that may open markup. */
const PROSE = /^(?=.*[\p{L}\p{N}])[^*_`~[\]<>\\!#\p{Cc}]*$/u;

/** Inline nodes as text; `apply` styles each piece with what encloses it (heading, bold, …). */
function inline(nodes: readonly MarkdownInline[], style: Style, apply: Apply): string {
  let out = "";
  for (const node of nodes) {
    if (node.type === "text") out += apply(node.text);
    else if (node.type === "code") out += apply(style.code(node.text));
    else if (node.type === "autolink") out += apply(style.underline(node.url));
    else if (node.type === "strong") out += inline(node.children, style, (s) => apply(style.bold(s)));
    else if (node.type === "emphasis") out += inline(node.children, style, (s) => apply(style.italic(s)));
    else {
      // `text (url)`, or either alone when the other is empty.
      const shown = node.url === "" ? "" : apply(style.dim(style.underline(node.url)));
      const text = inline(node.children, style, apply);
      out += text === "" || shown === "" ? text + shown : `${text}${apply(" (")}${shown}${apply(")")}`;
    }
  }
  return out;
}

/** One line of the tree as terminal text: line breaks and list markers' indents are kept as written. */
function renderLine(line: MarkdownLine, style: Style, columns: number): string {
  switch (line.type) {
    case "paragraph":
      return inline(line.children, style, (s) => s);
    case "rule":
      return style.dim("─".repeat(Math.max(3, Math.min(columns, 40))));
    case "heading": {
      const marks = style.dim("#".repeat(line.level));
      if (line.children.length === 0) return marks;
      return `${marks} ${inline(line.children, style, (s) => style.heading(s))}`;
    }
    case "quote": {
      const rest = renderLine(line.line, style, columns);
      return style.dim("│") + (rest === "" ? "" : ` ${rest}`);
    }
    case "item": {
      const marker = line.ordered ? line.marker : "•◦▪"[line.level % 3];
      return `${line.indent}${marker} ${inline(line.children, style, (s) => s)}`;
    }
    case "fence":
      return line.indent + style.dim(line.marker + line.info);
    case "code":
      return line.text === "" ? "" : style.codeBlock(line.text);
  }
}

/**
 * Renders markdown for a terminal: headings, bold, italic, inline code, fenced code blocks, bullet and
 * numbered lists, block quotes, horizontal rules and links (`text (url)`). With identity styles the output
 * has no escape codes. Line breaks are kept as they are; control characters in the text are shown as `�`.
 * Never throws.
 */
export function renderMarkdown(text: string, style: Style, options: MarkdownOptions = {}): string {
  const { columns = 80 } = options;
  return parseMarkdown(text).map((line) => renderLine(line, style, columns)).join("\n");
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
  const state: FenceState = newFenceState();
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
    draw((first ? prefix : "") + renderLine(parseLine(line, state), style, columns));
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
      const target = (first ? prefix : "") + renderLine(parseLine(buffer, { ...state }), style, columns);
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
