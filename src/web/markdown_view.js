// @ts-check
/// <reference lib="dom" />
/**
 * An answer's markdown as DOM nodes: the tree of `markdown.js` (the REPL draws the same tree as ANSI), its
 * lines grouped into paragraphs, lists, quotes and code blocks. Every piece of text goes in as a text node
 * through `el`, never as HTML; a link opens only an http, https or mailto URL (any other shows as text), and
 * an image is a link to it, never loaded.
 * @module
 */
import { el } from "./dom.js";
import { parseMarkdown } from "../text/markdown.js";

/** @typedef {import("../text/markdown.js").MarkdownInline} MarkdownInline */
/** @typedef {import("../text/markdown.js").MarkdownLine} MarkdownLine */

const SAFE_SCHEME = /^(https?|mailto):/i;

/**
 * The address a link may open: `url` normalized when it is an absolute http, https or mailto URL, else null
 * (`javascript:`, `data:`, relative paths, anything that does not parse). Pure.
 * @param {string} url
 * @returns {string | null}
 */
export function safeHref(url) {
  if (!SAFE_SCHEME.test(url)) return null;
  try {
    const parsed = new URL(url);
    return ["http:", "https:", "mailto:"].includes(parsed.protocol) ? parsed.href : null;
  } catch {
    return null;
  }
}

/**
 * @param {string} url
 * @param {Node[]} content the link's text (the URL itself when empty)
 * @param {boolean} inLink whether a link encloses this one: a link never nests, its text stays
 * @returns {Node[]}
 */
function anchor(url, content, inLink) {
  const text = content.length === 0 ? [document.createTextNode(url)] : content;
  const href = inLink ? null : safeHref(url);
  if (href === null) return text;
  return [el("a", { href, rel: "noopener noreferrer nofollow", target: "_blank" }, ...text)];
}

/**
 * @param {readonly MarkdownInline[]} nodes
 * @param {boolean} [inLink]
 * @returns {Node[]}
 */
function inline(nodes, inLink = false) {
  return nodes.flatMap((node) => {
    if (node.type === "text") return [document.createTextNode(node.text)];
    if (node.type === "code") return [el("code", {}, node.text)];
    if (node.type === "strong") return [el("strong", {}, ...inline(node.children, inLink))];
    if (node.type === "emphasis") return [el("em", {}, ...inline(node.children, inLink))];
    if (node.type === "autolink") return anchor(node.url, [], inLink);
    return anchor(node.url, inline(node.children, true), inLink);
  });
}

/**
 * A list from consecutive items, nested by their indent.
 * @param {Extract<MarkdownLine, { type: "item" }>[]} items
 */
function list(items) {
  /** @param {typeof items[number]} item */
  const open = (item) => {
    const start = item.ordered ? parseInt(item.marker, 10) : 1;
    return el(item.ordered ? "ol" : "ul", { start: start === 1 ? undefined : start });
  };
  const root = open(items[0]);
  const stack = [{ level: items[0].level, node: root }];
  for (const item of items) {
    while (stack.length > 1 && item.level < stack[stack.length - 1].level) stack.pop();
    const top = stack[stack.length - 1];
    const parent = top.node.lastElementChild;
    if (item.level > top.level && parent !== null) {
      const nested = open(item);
      parent.append(nested);
      stack.push({ level: item.level, node: nested });
    }
    stack[stack.length - 1].node.append(el("li", {}, ...inline(item.children)));
  }
  return root;
}

/**
 * Block elements of `lines`: runs of paragraph lines become one paragraph (its line breaks kept), runs of
 * items one list, runs of quoted lines one quote (its inner lines grouped the same way).
 * @param {readonly MarkdownLine[]} lines
 * @returns {HTMLElement[]}
 */
function blocks(lines) {
  /** @type {HTMLElement[]} */
  const out = [];
  for (let i = 0; i < lines.length;) {
    const line = lines[i];
    /** @template {MarkdownLine["type"]} T @param {T} type @param {(l: MarkdownLine) => boolean} [also] */
    const run = (type, also = () => true) => {
      const taken = [];
      while (i < lines.length && lines[i].type === type && also(lines[i])) taken.push(lines[i++]);
      return /** @type {Extract<MarkdownLine, { type: T }>[]} */ (taken);
    };
    if (line.type === "paragraph") {
      if (line.children.length === 0) {
        i++;
        continue;
      }
      const paragraph = run("paragraph", (l) => l.type === "paragraph" && l.children.length > 0);
      out.push(
        el("p", {}, ...paragraph.flatMap((l, n) => [...(n > 0 ? [el("br")] : []), ...inline(l.children)])),
      );
    } else if (line.type === "heading") {
      out.push(el(`h${Math.min(6, line.level + 2)}`, {}, ...inline(line.children)));
      i++;
    } else if (line.type === "rule") {
      out.push(el("hr"));
      i++;
    } else if (line.type === "quote") {
      out.push(el("blockquote", {}, ...blocks(run("quote").map((l) => l.line))));
    } else if (line.type === "item") {
      // A bullet after numbered items (or the other way round) at the outer level starts another list.
      const { level, ordered } = line;
      out.push(list(run("item", (l) => l.type === "item" && (l.level > level || l.ordered === ordered))));
    } else {
      // A fence and the code after it, up to its closing fence.
      const info = line.type === "fence" ? line.info.trim().split(/\s+/)[0] : "";
      if (line.type === "fence") i++;
      const code = run("code").map((l) => l.text);
      const end = lines[i];
      if (end?.type === "fence" && end.closing) i++;
      out.push(el("pre", { "data-lang": info || undefined }, el("code", {}, code.join("\n"))));
    }
  }
  return out;
}

/**
 * `text` (an answer, as markdown) as block elements to append. Never throws.
 * @param {string} text
 * @returns {HTMLElement[]}
 */
export function markdownNodes(text) {
  return blocks(parseMarkdown(text));
}
