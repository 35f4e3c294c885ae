/**
 * The terminal markdown renderer (`src/cli/markdown.ts`): each construct with colour off (plain, readable
 * text) and on (a tagging style shows which piece got which style), the streamed rendering against the whole
 * one on a simulated terminal, and random input that must never throw.
 */
import { fc } from "./_fast_check.ts";
import assert from "node:assert/strict";
import { markdownStream, renderMarkdown } from "../src/cli/markdown.ts";
import { createStyle, type Style } from "../src/cli/render.ts";
import { displayWidth } from "../src/cli/_width.ts";

const plain = createStyle(false);
const ansi = createStyle(true);
/** Marks each styled piece as `<name>text</name>`, so tests read which style covers what. */
const tags = Object.fromEntries(
  Object.keys(ansi).map((name) => [name, (text: string) => `<${name}>${text}</${name}>`]),
) as unknown as Style;

const CLEAR = "\r\x1b[2K";

const width = displayWidth;

/**
 * What a terminal `columns` wide shows after `writes`: `\r\x1b[2K` clears the current row, `\n` ends it.
 * Clearing a line that has wrapped would clear only its last row, so that fails the test.
 */
function screen(writes: string[], columns = Infinity): string {
  const rows: string[] = [];
  let row = "";
  // deno-lint-ignore no-control-regex
  for (const piece of writes.join("").split(/(\r\x1b\[2K|\n)/)) {
    if (piece === CLEAR) {
      assert.ok(width(row) < columns, `cleared a wrapped line: ${JSON.stringify(row)}`);
      row = "";
    } else if (piece === "\n") {
      rows.push(row);
      row = "";
    } else {
      assert.ok(!piece.includes("\r"), "a carriage return outside a clear-line sequence");
      row += piece;
    }
  }
  return rows.map((r) => r + "\n").join("") + row;
}

function streamed(chunks: string[], style: Style, options: { columns?: number; prefix?: string } = {}) {
  const writes: string[] = [];
  const stream = markdownStream((text) => writes.push(text), style, options);
  for (const chunk of chunks) stream.push(chunk);
  stream.end();
  return writes;
}

const cases: [string, string, string, string][] = [
  ["heading", "## Setup ##", "## Setup", "<dim>##</dim> <heading>Setup</heading>"],
  [
    "heading with bold",
    "# A **b**",
    "# A b",
    "<dim>#</dim> <heading>A </heading><heading><bold>b</bold></heading>",
  ],
  ["not a heading", "#hashtag", "#hashtag", "#hashtag"],
  ["bold", "a **b** c __d__", "a b c d", "a <bold>b</bold> c <bold>d</bold>"],
  ["italic", "*a* and _b_", "a and b", "<italic>a</italic> and <italic>b</italic>"],
  ["nested emphasis", "***x***", "x", "<bold><italic>x</italic></bold>"],
  ["snake_case stays", "a snake_case_name", "a snake_case_name", "a snake_case_name"],
  ["lone stars stay", "2 * 3 * 4", "2 * 3 * 4", "2 * 3 * 4"],
  ["escapes", "\\*not\\* \\`x\\`", "*not* `x`", "*not* `x`"],
  ["inline code", "run `deno **task**` now", "run deno **task** now", "run <code>deno **task**</code> now"],
  ["double-tick code", "``a ` b``", "a ` b", "<code>a ` b</code>"],
  [
    "link",
    'see [the docs](https://x.dev/a_b "t")',
    "see the docs (https://x.dev/a_b)",
    "see the docs (<dim><underline>https://x.dev/a_b</underline></dim>)",
  ],
  ["link with bold text", "[**b**](u)", "b (u)", "<bold>b</bold> (<dim><underline>u</underline></dim>)"],
  ["link whose text is its url", "[u](u)", "u", "<dim><underline>u</underline></dim>"],
  ["image", "![a cat](cat.png)", "a cat (cat.png)", "a cat (<dim><underline>cat.png</underline></dim>)"],
  ["autolink", "<https://a.b/c>", "https://a.b/c", "<underline>https://a.b/c</underline>"],
  [
    "bullets by depth",
    "- a\n  * b\n    + *c*",
    "• a\n  ◦ b\n    ▪ c",
    "• a\n  ◦ b\n    ▪ <italic>c</italic>",
  ],
  ["numbered", "1. one\n  10) **ten**", "1. one\n  10) ten", "1. one\n  10) <bold>ten</bold>"],
  [
    "quote",
    "> said **so**\n>> deeper\n>",
    "│ said so\n│ │ deeper\n│",
    "<dim>│</dim> said <bold>so</bold>\n<dim>│</dim> <dim>│</dim> deeper\n<dim>│</dim>",
  ],
  ["rule", "* * *", "─".repeat(40), `<dim>${"─".repeat(40)}</dim>`],
  ["bold line is not a rule", "**x**", "x", "<bold>x</bold>"],
];

for (const [name, markdown, off, on] of cases) {
  Deno.test(`renderMarkdown() renders ${name} plainly without colour and styled with it`, () => {
    assert.equal(renderMarkdown(markdown, plain), off);
    assert.equal(renderMarkdown(markdown, tags), on);
  });
}

Deno.test("renderMarkdown() shows fenced code verbatim, styled per line, with the fences dim", () => {
  const markdown = "```ts\nconst a = **b**; // `c`\n\n  - not a list\n```\n*after*";
  assert.equal(
    renderMarkdown(markdown, plain),
    "```ts\nconst a = **b**; // `c`\n\n  - not a list\n```\nafter",
  );
  assert.equal(
    renderMarkdown(markdown, tags),
    "<dim>```ts</dim>\n<codeBlock>const a = **b**; // `c`</codeBlock>\n\n<codeBlock>  - not a list</codeBlock>\n" +
      "<dim>```</dim>\n<italic>after</italic>",
  );
});

Deno.test("renderMarkdown() closes a fence only with the same character, at least as long", () => {
  const markdown = "````\n```\n~~~\n````\n**b**";
  assert.equal(
    renderMarkdown(markdown, tags),
    "<dim>````</dim>\n<codeBlock>```</codeBlock>\n<codeBlock>~~~</codeBlock>\n<dim>````</dim>\n<bold>b</bold>",
  );
  assert.equal(renderMarkdown("~~~\n# x", tags), "<dim>~~~</dim>\n<codeBlock># x</codeBlock>");
});

Deno.test("renderMarkdown() draws real ANSI with colour on, and the rule no wider than the terminal", () => {
  assert.equal(renderMarkdown("**b** `c`", ansi), "\x1b[1mb\x1b[0m \x1b[36mc\x1b[0m");
  assert.equal(renderMarkdown("```\nx", ansi), "\x1b[2m```\x1b[0m\n\x1b[33mx\x1b[0m");
  assert.equal(renderMarkdown("---", plain, { columns: 12 }), "─".repeat(12));
});

Deno.test("renderMarkdown() shows control characters in the text as U+FFFD and drops a CR before LF", () => {
  assert.equal(renderMarkdown("a\x1b[31mb\r\nc\rd\x07", plain), "a\uFFFD[31mb\nc\uFFFDd\uFFFD");
});

const markdownish = fc.string({
  unit: fc.constantFrom(..."*_`[]()#>-+1.~ \n\nab\\<!:h\t\r\x1b\u00e9\u4e2d|"),
  maxLength: 160,
  size: "medium",
});
const anyText = fc.oneof(markdownish, fc.string({ unit: "binary", maxLength: 160, size: "medium" }));

Deno.test("renderMarkdown() never throws, and without colour writes no escape code", () => {
  fc.assert(
    fc.property(anyText, (text) => {
      const out = renderMarkdown(text, plain);
      assert.ok(!out.includes("\x1b"), JSON.stringify(out));
      renderMarkdown(text, ansi);
    }),
    { numRuns: 500 },
  );
});

Deno.test("renderMarkdown() draws pathological nesting whole, the markup it cannot pair as text", () => {
  // Just under the length past which inline markup is not parsed (web_markdown_test.ts checks the limits).
  const brackets = "[".repeat(1000) + "*_`".repeat(600) + "**a ".repeat(240);
  const stars = "*a ".repeat(1333);
  assert.equal(renderMarkdown(brackets, plain).replaceAll(/[*_`]/g, ""), brackets.replaceAll(/[*_`]/g, ""));
  assert.match(renderMarkdown(stars, plain), /^(?:\*?a ?)+\*?$/);
});

Deno.test("markdownStream() in any chunking shows what renderMarkdown() does, plus a newline", () => {
  const cuts = fc.array(fc.nat({ max: 200 }), { maxLength: 40, size: "medium" });
  const options = fc.record({
    columns: fc.integer({ min: 2, max: 40 }),
    prefix: fc.constantFrom("", "agent> "),
  });
  fc.assert(
    fc.property(anyText, cuts, options, fc.boolean(), (text, at, opts, color) => {
      const style = color ? ansi : plain;
      const points = [...new Set(at.map((n) => n % (text.length + 1)))].sort((a, b) => a - b);
      const chunks = [0, ...points].map((p, i, all) => text.slice(p, all[i + 1] ?? text.length));
      const shown = screen(streamed(chunks, style, opts), opts.columns);
      assert.equal(shown, opts.prefix + renderMarkdown(text, style, opts) + "\n");
    }),
    { numRuns: 1000 },
  );
});

Deno.test("markdownStream() redraws a changing partial line in place and appends to a growing one", () => {
  const writes = streamed(["Hello", " wor", "ld **bo", "ld** x\nnext"], tags);
  assert.deepEqual(writes, [
    "Hello",
    " wor",
    "ld **bo",
    `${CLEAR}Hello world <bold>bold</bold> x`,
    "\n",
    "next",
    "\n",
  ]);
});

Deno.test("markdownStream() writes each completed line of a fenced block once", () => {
  const writes = streamed(["```py\n", "print(1)\n", "print(2)\n", "```\n", "done"], tags);
  assert.deepEqual(writes, [
    "<dim>```py</dim>",
    "\n",
    "<codeBlock>print(1)</codeBlock>",
    "\n",
    "<codeBlock>print(2)</codeBlock>",
    "\n",
    "<dim>```</dim>",
    "\n",
    "done",
    "\n",
  ]);
});

Deno.test("markdownStream() redraws the prefix with the first line and stops redrawing a line that would wrap", () => {
  assert.deepEqual(streamed(["*a", "*"], tags, { prefix: "> " }), [
    "> *a",
    `${CLEAR}> <italic>a</italic>`,
    "\n",
  ]);
  // 10 columns: "*abcdefgh" fits, "*abcdefghij" would not, so the row keeps "*abcdefgh" until the line ends.
  const writes = streamed(["*abcdefgh", "ij", "*"], tags, { columns: 10 });
  assert.deepEqual(writes, ["*abcdefgh", `${CLEAR}<italic>abcdefghij</italic>`, "\n"]);
});

Deno.test("markdownStream() lets a line of plain prose wrap as it grows, and holds it once markup may follow", () => {
  const writes = streamed(["- one two", " three four", " **five", "** six"], tags, { columns: 10 });
  assert.deepEqual(writes, ["• one two", " three four", " <bold>five</bold> six", "\n"]);
});

Deno.test("markdownStream() ends with a newline, once, and ignores text after end()", () => {
  const writes: string[] = [];
  const stream = markdownStream((text) => writes.push(text), plain);
  stream.end();
  stream.end();
  stream.push("late");
  assert.deepEqual(writes, ["\n"]);
});
