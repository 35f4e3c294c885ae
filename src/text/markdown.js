// @ts-check
/**
 * Markdown as a neutral tree, the one parser of the REPL and the web page: `src/cli/markdown.ts` renders the
 * tree as ANSI text, `markdown_view.js` as DOM nodes. A plain module with no DOM and no Deno API, so the
 * browser loads it as it is and Deno type-checks it from its JSDoc.
 *
 * The tree has one node per source line (what block the line is: a paragraph line, a heading, a list item, a
 * fence, a line of code, …) holding its inline nodes. Parsing goes line by line and the only thing one line
 * hands to the next is whether a fenced code block is open ({@linkcode FenceState}), so a streamed answer can
 * be parsed as each line completes. Raw HTML is never markup here: `<b>` is text. Control characters other
 * than tab become U+FFFD. Past a nesting depth or a line length, text stays as it is, so hostile input costs
 * linear time.
 * @module
 */

/**
 * @typedef {{ type: "text", text: string }
 *   | { type: "strong", children: MarkdownInline[] }
 *   | { type: "emphasis", children: MarkdownInline[] }
 *   | { type: "code", text: string }
 *   | { type: "link", url: string, children: MarkdownInline[], image: boolean }
 *   | { type: "autolink", url: string }} MarkdownInline
 * Inline markup. A link's `children` are empty when its text is its URL (or empty); `url` is as written,
 * never checked: each renderer decides what it may open.
 */

/**
 * @typedef {{ type: "paragraph", children: MarkdownInline[] }
 *   | { type: "heading", level: number, children: MarkdownInline[] }
 *   | { type: "rule" }
 *   | { type: "quote", line: MarkdownLine }
 *   | { type: "item", ordered: boolean, indent: string, level: number, marker: string,
 *       children: MarkdownInline[] }
 *   | { type: "fence", indent: string, marker: string, info: string, closing: boolean }
 *   | { type: "code", text: string }} MarkdownLine
 * One source line. A paragraph line without children is an empty line; `item.level` is its nesting (two
 * columns of indent a level, a tab four); `fence` opens a code block (`closing`: ends it) and `code` is a line
 * inside one, verbatim.
 */

/** @typedef {{ fence: { char: string, length: number } | null }} FenceState The open code fence, if any. */

// deno-lint-ignore no-control-regex
const CONTROL = /[\x00-\x08\x0a-\x1f\x7f-\x9f]/g;
const PUNCTUATION = /[!-\/:-@\[-`{-~]/;
const WORD = /[\p{L}\p{N}]/u;
const SPACE = /\s/;
const FENCE = /^([ \t]*)(`{3,}|~{3,})(.*)$/;
const RULE = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
const HEADING = /^ {0,3}(#{1,6})(?:[ \t]+(.*))?$/;
const QUOTE = /^ {0,3}>[ ]?(.*)$/;
const BULLET = /^([ \t]*)([-*+])[ \t]+(.*)$/;
const NUMBERED = /^([ \t]*)(\d{1,9}[.)])[ \t]+(.*)$/;
// Past these, text is kept as it is: bounds recursion and the quadratic delimiter search.
const MAX_DEPTH = 8;
const MAX_INLINE = 4000;

/** @param {string} text @param {number} at @param {string} char */
function runLength(text, at, char) {
  let end = at;
  while (text[end] === char) end++;
  return end - at;
}

/** Where the next run of exactly `length` backticks starts at or after `from`, or -1. @param {string} text @param {number} from @param {number} length */
function closingTicks(text, from, length) {
  for (let j = text.indexOf("`", from); j >= 0; j = text.indexOf("`", j + runLength(text, j, "`"))) {
    if (runLength(text, j, "`") === length) return j;
  }
  return -1;
}

/**
 * The emphasis opened at `at` (`*`, `_`, `**`, `__`): its inner text and where it ends, or null.
 * @param {string} text
 * @param {number} at
 * @returns {{ inner: string, end: number, strong: boolean } | null}
 */
function emphasis(text, at) {
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

/**
 * The `[label](url)` starting at `at`, or null.
 * @param {string} text
 * @param {number} at
 * @returns {{ label: string, url: string, end: number } | null}
 */
function link(text, at) {
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

/**
 * The inline nodes of one line of text. Adjacent plain text is one text node, split only where markup was.
 * Never throws.
 * @param {string} text
 * @param {number} [depth] how deeply this text is nested in other markup
 * @returns {MarkdownInline[]}
 */
export function parseInline(text, depth = 0) {
  if (depth > MAX_DEPTH || text.length > MAX_INLINE) return text === "" ? [] : [{ type: "text", text }];
  /** @type {MarkdownInline[]} */
  const out = [];
  let plain = "";
  /** @param {MarkdownInline | null} node */
  const put = (node) => {
    if (plain !== "") out.push({ type: "text", text: plain });
    plain = "";
    if (node !== null) out.push(node);
  };
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
      put(code === "" ? null : { type: "code", text: code });
      i = close + ticks;
      continue;
    }
    const image = char === "!" && text[i + 1] === "[";
    const found = char === "[" || image ? link(text, image ? i + 1 : i) : null;
    if (found !== null) {
      const { label, url } = found;
      const children = label === url ? [] : parseInline(label, depth + 1);
      put({ type: "link", url, children, image });
      i = found.end;
      continue;
    }
    const auto = char === "<" ? /^<((?:https?|mailto):[^\s<>]+)>/.exec(text.slice(i, i + 2048)) : null;
    if (auto !== null) {
      put({ type: "autolink", url: auto[1] });
      i += auto[0].length;
      continue;
    }
    const span = char === "*" || char === "_" ? emphasis(text, i) : null;
    if (span !== null) {
      const children = parseInline(span.inner, depth + 1);
      put(span.strong ? { type: "strong", children } : { type: "emphasis", children });
      i = span.end;
      continue;
    }
    plain += char;
    i++;
  }
  put(null);
  return out;
}

/** @param {string} indent */
function level(indent) {
  return Math.floor(indent.replaceAll("\t", "    ").length / 2);
}

/**
 * A line outside code fences: rule, heading, quote, list item, or a paragraph line.
 * @param {string} line
 * @param {number} depth how many quotes enclose it
 * @returns {MarkdownLine}
 */
function parseBlock(line, depth) {
  if (RULE.test(line)) return { type: "rule" };
  const heading = HEADING.exec(line);
  if (heading !== null) {
    const title = (heading[2] ?? "").replace(/(?:^|[ \t]+)#+[ \t]*$/, "").trim();
    return { type: "heading", level: heading[1].length, children: title === "" ? [] : parseInline(title) };
  }
  const quote = depth < MAX_DEPTH ? QUOTE.exec(line) : null;
  if (quote !== null) return { type: "quote", line: parseBlock(quote[1], depth + 1) };
  const bullet = BULLET.exec(line);
  const item = bullet ?? NUMBERED.exec(line);
  if (item !== null) {
    const [, indent, marker, text] = item;
    const ordered = bullet === null;
    return { type: "item", ordered, indent, level: level(indent), marker, children: parseInline(text) };
  }
  return { type: "paragraph", children: parseInline(line) };
}

/** A state before the first line: no fence open. @returns {FenceState} */
export function newFenceState() {
  return { fence: null };
}

/**
 * One line (without its newline), updating `state` when it opens or closes a code fence. Never throws.
 * @param {string} raw
 * @param {FenceState} state
 * @returns {MarkdownLine}
 */
export function parseLine(raw, state) {
  const line = raw.replace(/\r$/, "").replace(CONTROL, "\uFFFD");
  const fence = FENCE.exec(line);
  if (state.fence !== null) {
    const { char, length } = state.fence;
    if (fence === null || fence[2][0] !== char || fence[2].length < length || fence[3].trim() !== "") {
      return { type: "code", text: line };
    }
    state.fence = null;
    return { type: "fence", indent: fence[1], marker: fence[2], info: "", closing: true };
  }
  // A backtick in a backtick fence's info string makes it inline code instead (CommonMark).
  if (fence !== null && !(fence[2][0] === "`" && fence[3].includes("`"))) {
    state.fence = { char: fence[2][0], length: fence[2].length };
    return { type: "fence", indent: fence[1], marker: fence[2], info: fence[3], closing: false };
  }
  return parseBlock(line, 0);
}

/**
 * The tree of `text`: one node per line. Never throws.
 * @param {string} text
 * @returns {MarkdownLine[]}
 */
export function parseMarkdown(text) {
  const state = newFenceState();
  return text.split("\n").map((line) => parseLine(line, state));
}
