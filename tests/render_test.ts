/**
 * Terminal styling (`src/cli/render.ts`): when colour is wanted, what each style draws, and the stats line
 * after an answer. `renderEvent`'s lines are pinned by the golden REPL transcripts.
 */
import assert from "node:assert/strict";
import { colorWanted, createStyle, statsLine, type Style } from "../src/cli/render.ts";

const tty = { env: {}, isTerminal: true };

Deno.test("colorWanted() is true only on a terminal without NO_COLOR, --no-color or TERM=dumb", () => {
  assert.equal(colorWanted(tty), true);
  assert.equal(colorWanted({ ...tty, env: { TERM: "xterm-256color" }, noColorFlag: false }), true);
  assert.equal(colorWanted({ ...tty, isTerminal: false }), false);
  assert.equal(colorWanted({ ...tty, noColorFlag: true }), false);
  assert.equal(colorWanted({ ...tty, env: { TERM: "dumb" } }), false);
  assert.equal(colorWanted({ ...tty, env: { NO_COLOR: "1" } }), false);
  assert.equal(colorWanted({ ...tty, env: { NO_COLOR: "" } }), false, "NO_COLOR set but empty");
});

Deno.test("createStyle(false) returns every text unchanged; createStyle(true) wraps each in its own code", () => {
  const off = createStyle(false);
  const on = createStyle(true);
  const names = Object.keys(on) as (keyof Style)[];
  assert.deepEqual(
    names.sort(),
    ["bold", "code", "codeBlock", "dim", "heading", "italic", "red", "underline"],
  );
  const codes = new Set<string>();
  for (const name of names) {
    assert.equal(off[name]("x"), "x", name);
    // deno-lint-ignore no-control-regex
    const match = /^\x1b\[([0-9;]+)mx\x1b\[0m$/.exec(on[name]("x"));
    assert.ok(match, `${name}: ${JSON.stringify(on[name]("x"))}`);
    codes.add(match[1]);
  }
  assert.equal(codes.size, names.length, "two styles draw the same");
});

const plain = createStyle(false);
const stats = { ms: 1234, modelCalls: 2, toolCalls: 1, tokensIn: 310, tokensOut: 24 };

Deno.test("statsLine() says time, model calls, tool calls and tokens in and out", () => {
  assert.equal(statsLine(stats, plain), "1.2 s · 2 model calls · 1 tool call · 310 → 24 tokens");
  assert.equal(
    statsLine(stats, createStyle(true)),
    "\x1b[2m1.2 s · 2 model calls · 1 tool call · 310 → 24 tokens\x1b[0m",
  );
});

Deno.test("statsLine() uses the singular for one and leaves out tool calls when there were none", () => {
  assert.equal(
    statsLine({ ...stats, modelCalls: 1, toolCalls: 0 }, plain),
    "1.2 s · 1 model call · 310 → 24 tokens",
  );
  assert.equal(
    statsLine({ ...stats, toolCalls: 3 }, plain),
    "1.2 s · 2 model calls · 3 tool calls · 310 → 24 tokens",
  );
});

Deno.test("statsLine() leaves out tokens when the provider reported no usage", () => {
  assert.equal(
    statsLine({ ...stats, tokensIn: null, tokensOut: null }, plain),
    "1.2 s · 2 model calls · 1 tool call",
  );
  assert.equal(statsLine({ ...stats, tokensOut: null }, plain), "1.2 s · 2 model calls · 1 tool call");
});

Deno.test("statsLine() shows short times in ms, long ones in minutes, and groups large token counts", () => {
  const line = (ms: number) => statsLine({ ...stats, ms, toolCalls: 0, tokensIn: null }, plain);
  assert.equal(line(85.4), "85 ms · 2 model calls");
  assert.equal(line(-5), "0 ms · 2 model calls");
  assert.equal(line(999.7), "1.0 s · 2 model calls");
  assert.equal(line(59_940), "59.9 s · 2 model calls");
  assert.equal(line(59_960), "1 min 0 s · 2 model calls");
  assert.equal(line(125_000), "2 min 5 s · 2 model calls");
  assert.equal(
    statsLine({ ...stats, tokensIn: 12_345, tokensOut: 1_000 }, plain),
    "1.2 s · 2 model calls · 1 tool call · 12,345 → 1,000 tokens",
  );
});
