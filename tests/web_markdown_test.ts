/**
 * The one markdown parser (`src/text/markdown.js`), as a tree: what each construct parses to, that raw HTML
 * and hostile links stay data (a link's URL is kept as written; `safeHref` of the page's renderer decides what
 * may open), that huge and deeply nested input is kept as text, and that random input never throws. The
 * terminal rendering of the same tree is tests/markdown_test.ts; the DOM rendering runs in Chromium
 * (tests/web_chat_browser_test.ts).
 */
import { fc } from "./_fast_check.ts";
import assert from "node:assert/strict";
import { newFenceState, parseInline, parseLine, parseMarkdown } from "../src/text/markdown.js";
import { safeHref } from "../src/web/markdown_view.js";

const text = (t: string) => ({ type: "text", text: t });

Deno.test("parseInline() gives strong, emphasis, code, links and autolinks as nodes, with plain text merged", () => {
  assert.deepEqual(parseInline("Buy **milk** and *eggs*, `x * y` \\*not\\*"), [
    text("Buy "),
    { type: "strong", children: [text("milk")] },
    text(" and "),
    { type: "emphasis", children: [text("eggs")] },
    text(", "),
    { type: "code", text: "x * y" },
    text(" *not*"),
  ]);
  assert.deepEqual(parseInline('[the **shop**](https://shop.example/a_b "t") <mailto:a@b.example>'), [
    {
      type: "link",
      url: "https://shop.example/a_b",
      image: false,
      children: [text("the "), { type: "strong", children: [text("shop")] }],
    },
    text(" "),
    { type: "autolink", url: "mailto:a@b.example" },
  ]);
  assert.deepEqual(parseInline("[u](u) ![cat](c.png)"), [
    { type: "link", url: "u", image: false, children: [] },
    text(" "),
    { type: "link", url: "c.png", image: true, children: [text("cat")] },
  ]);
});

Deno.test("parseLine() tells each line's block: heading, rule, quote, list items with their level, paragraph", () => {
  const state = newFenceState();
  assert.deepEqual(parseLine("## Setup ##", state), { type: "heading", level: 2, children: [text("Setup")] });
  assert.deepEqual(parseLine("* * *", state), { type: "rule" });
  assert.deepEqual(parseLine("> said **so**", state), {
    type: "quote",
    line: { type: "paragraph", children: [text("said "), { type: "strong", children: [text("so")] }] },
  });
  assert.deepEqual(parseLine("    + deep", state), {
    type: "item",
    ordered: false,
    indent: "    ",
    level: 2,
    marker: "+",
    children: [text("deep")],
  });
  assert.deepEqual(parseLine("10) ten", state), {
    type: "item",
    ordered: true,
    indent: "",
    level: 0,
    marker: "10)",
    children: [text("ten")],
  });
  assert.deepEqual(parseLine("", state), { type: "paragraph", children: [] });
});

Deno.test("parseMarkdown() keeps fenced code verbatim and hands only the open fence from line to line", () => {
  assert.deepEqual(parseMarkdown("```ts\n**b** <i>\n~~~\n```\n*a*"), [
    { type: "fence", indent: "", marker: "```", info: "ts", closing: false },
    { type: "code", text: "**b** <i>" },
    { type: "code", text: "~~~" },
    { type: "fence", indent: "", marker: "```", info: "", closing: true },
    { type: "paragraph", children: [{ type: "emphasis", children: [text("a")] }] },
  ]);
});

Deno.test("parseMarkdown() leaves raw HTML as text and keeps a hostile link's URL as written, for the renderer to refuse", () => {
  assert.deepEqual(parseMarkdown("<script>alert(1)</script> <img src=x onerror=alert(1)>"), [
    { type: "paragraph", children: [text("<script>alert(1)</script> <img src=x onerror=alert(1)>")] },
  ]);
  assert.deepEqual(parseInline("[click](javascript:alert(1))"), [
    { type: "link", url: "javascript:alert(1)", image: false, children: [text("click")] },
  ]);
  // Only an http(s) or mailto autolink is one; anything else in angle brackets is text.
  assert.deepEqual(parseInline("<javascript:alert(1)>"), [text("<javascript:alert(1)>")]);
  assert.deepEqual(parseInline("[a [nested [deep]]](http://ok.example/x)"), [
    { type: "link", url: "http://ok.example/x", image: false, children: [text("a [nested [deep]]")] },
  ]);
});

Deno.test("safeHref() lets a link open only an absolute http, https or mailto URL", () => {
  assert.equal(safeHref("https://a.example"), "https://a.example/");
  assert.equal(safeHref("HTTP://a.example/x?y#z"), "http://a.example/x?y#z");
  assert.equal(safeHref("mailto:a@b.example"), "mailto:a@b.example");
  for (
    const url of [
      "javascript:alert(1)",
      "JaVaScRiPt:alert(1)",
      " javascript:alert(1)",
      "java\tscript:alert(1)",
      "data:text/html,<script>alert(1)</script>",
      "vbscript:x",
      "/v1/sessions",
      "//evil.example",
      "https://",
      "",
    ]
  ) {
    assert.equal(safeHref(url), null, url);
  }
});

Deno.test("parseMarkdown() keeps a huge line and deep nesting as text instead of parsing on and on", () => {
  const huge = "[".repeat(3000) + "**a".repeat(2000);
  assert.deepEqual(parseMarkdown(huge), [{ type: "paragraph", children: [text(huge)] }]);
  // Nested past the depth limit: the innermost markup stays as written.
  let nodes = parseInline("[".repeat(12) + "x" + "](u)".repeat(12));
  let depth = 0;
  while (nodes.length === 1 && nodes[0].type === "link") {
    nodes = nodes[0].children;
    depth++;
  }
  assert.equal(depth, 9, "links nest as deep as the limit, then the rest is text");
  assert.equal(nodes[0].type, "text");
  assert.equal(parseMarkdown("> ".repeat(50) + "x").length, 1);
});

Deno.test("parseMarkdown() never throws and loses no line", () => {
  const markdownish = fc.string({
    unit: fc.constantFrom(..."*_`[]()#>-+1.~ \n\nab\\<!:h\t\r\x1b\u00e9|"),
    maxLength: 200,
    size: "medium",
  });
  fc.assert(
    fc.property(fc.oneof(markdownish, fc.string({ unit: "binary", maxLength: 200 })), (input) => {
      assert.equal(parseMarkdown(input).length, input.split("\n").length);
    }),
    { numRuns: 500 },
  );
});
