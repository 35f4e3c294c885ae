/** How the line editor draws: display width, stand-ins for control characters, redraw layout. All pure. */
import assert from "node:assert/strict";
import { CONTINUATION, drawEntry, PROMPT } from "../src/cli/_draw.ts";
import { charWidth, displayWidth, visible } from "../src/cli/_width.ts";

const draw = (buffer: string, cursor: number, width = 80, fromRow = 0) =>
  drawEntry(buffer, cursor, { fromRow, width, prompts: [PROMPT, CONTINUATION] });

Deno.test("displayWidth counts wide characters 2, combining and zero-width ones 0, colour codes none", () => {
  assert.equal(displayWidth("日本語"), 6);
  assert.equal(displayWidth("ｆｕｌｌ"), 8, "fullwidth forms");
  assert.equal(displayWidth("😀"), 2);
  assert.equal(displayWidth("e\u0301"), 1, "a combining accent");
  assert.equal(displayWidth("a\u200bb"), 2, "a zero-width space");
  assert.equal(displayWidth("\x1b[1mab\x1b[0m"), 2);
  assert.equal(displayWidth("é─x"), 3, "narrow characters past U+1100 count 1");
  assert.equal(charWidth("\x1b"), 0);
});

Deno.test("drawEntry puts the cursor after wide characters by their columns", () => {
  assert.ok(draw("日本語", 3).text.endsWith("\r\x1b[11C"), JSON.stringify(draw("日本語", 3).text));
  assert.ok(draw("日本語", 1).text.endsWith("\r\x1b[7C"));
});

Deno.test("drawEntry counts the rows of a wrapped line of wide characters, wrapping one that does not fit", () => {
  // 10 columns: the prompt takes 5, 日 and 本 4; 語 does not fit the last one, so it starts the 2nd row.
  const drawn = draw("日本語", 3, 10);
  assert.equal(drawn.row, 1);
  assert.ok(drawn.text.endsWith("\r\x1b[2C"));
  assert.ok(draw("日本語x", 4, 10, 1).text.startsWith("\r\x1b[1A\x1b[0J"), "the redraw goes up the row");
  assert.equal(draw("日本語", 0, 10).row, 0, "the cursor on the first row: the end is one below");
  assert.ok(draw("日本語", 0, 10).text.endsWith("\x1b[1A\r\x1b[5C"));
});

Deno.test("drawEntry moves to a new row when the last line ends exactly at the terminal's edge", () => {
  const drawn = draw("abcde", 5, 10);
  assert.equal(drawn.row, 1);
  assert.ok(drawn.text.endsWith("abcde\r\n\r"), JSON.stringify(drawn.text));
});

Deno.test("visible shows control characters as caret stand-ins and tabs as spaces to the next 8 columns", () => {
  assert.equal(visible("\x1b[31mred\x07"), "^[[31mred^G");
  assert.equal(visible("\x03\x7f\x9b"), "^C^?\uFFFD");
  assert.equal(visible("a\tb\t"), "a       b       ");
  assert.equal(visible("日\tx"), "日      x", "a tab after a wide character");
});

Deno.test("drawEntry draws no control character of the buffer and measures the stand-ins", () => {
  const drawn = draw("a\x1b]52;c;aGk=\x07\tb", 15);
  assert.ok(!drawn.text.includes("\x1b]"), JSON.stringify(drawn.text));
  assert.ok(!drawn.text.includes("\x07"));
  assert.ok(drawn.text.includes("a^[]52;c;aGk=^G b"));
  assert.ok(drawn.text.endsWith("\r\x1b[22C"), JSON.stringify(drawn.text));
});
