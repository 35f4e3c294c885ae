/** The key decoder's escape sequences: Esc alone, Esc Esc, and CSI sequences it does not know. */
import assert from "node:assert/strict";
import { KeyDecoder } from "../src/cli/keys.ts";

Deno.test("KeyDecoder: Esc followed by Esc is one Escape key, and the second starts a sequence", () => {
  const decoder = new KeyDecoder();
  assert.deepEqual(decoder.push("\x1b\x1b[A"), [{ name: "escape" }, { name: "up" }]);
  assert.deepEqual(decoder.push("\x1b"), []);
  assert.ok(decoder.pending);
  assert.deepEqual(decoder.push("\x1b[A"), [{ name: "escape" }, { name: "up" }]);
  assert.ok(!decoder.pending);
});

Deno.test("KeyDecoder.flush ends a lone Esc as the Escape key, so the next key is not taken as Alt+key", () => {
  const decoder = new KeyDecoder();
  assert.deepEqual(decoder.push("\x1b"), []);
  assert.deepEqual(decoder.flush(), [{ name: "escape" }]);
  assert.deepEqual(decoder.push("a"), [{ name: "text", text: "a" }]);
  assert.deepEqual(decoder.push("\x1b[1;"), []);
  assert.deepEqual(decoder.flush(), [], "an unfinished sequence is dropped");
  assert.deepEqual(decoder.push("5"), [{ name: "text", text: "5" }]);
  assert.deepEqual(decoder.flush(), [], "nothing waits");
  assert.deepEqual(decoder.push("\x1b[200~x\x1b[20"), []);
  assert.ok(!decoder.pending, "a paste waiting for its end is not flushed");
  assert.deepEqual(decoder.flush(), []);
  assert.deepEqual(decoder.push("1~"), [{ name: "paste", text: "x" }]);
});

Deno.test("KeyDecoder ignores CSI sequences with private parameter and intermediate bytes", () => {
  const decoder = new KeyDecoder();
  assert.deepEqual(decoder.push("\x1b[?1;2cx\x1b[2 qy\x1b[>0;95;0c"), [
    { name: "text", text: "x" },
    { name: "text", text: "y" },
  ]);
  assert.deepEqual(decoder.push("\x1b[?1;2"), [], "unfinished: waits");
  assert.deepEqual(decoder.push("c\x1b[?25A"), [], "a private-parameter A is no arrow");
  assert.deepEqual(decoder.push("\x1b[1;5A\x1b😀z"), [{ name: "up" }, { name: "text", text: "z" }]);
});
