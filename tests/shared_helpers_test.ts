/** The small helpers every module shares: the abortable wait, redaction, and cutting text. */
import assert from "node:assert/strict";
import { abortable, abortError, delay } from "../src/abort.ts";
import { redact } from "../src/redact.ts";
import { shorten } from "../src/shorten.ts";

Deno.test("delay() resolves after its time and rejects with the signal's reason at once when aborted", async () => {
  await delay(1);
  const controller = new AbortController();
  const waiting = delay(60_000, controller.signal);
  controller.abort(new Error("stop"));
  await assert.rejects(waiting, /stop/);
  await assert.rejects(
    delay(1, AbortSignal.abort()),
    (e) => e instanceof DOMException && e.name === "AbortError",
  );
});

Deno.test("abortable() settles as its promise does, or with the first signal's reason", async () => {
  assert.equal(await abortable(Promise.resolve(7), [undefined]), 7);
  const controller = new AbortController();
  let release!: () => void;
  const never = new Promise<void>((resolve) => (release = resolve));
  const waiting = abortable(never, [new AbortController().signal, controller.signal]);
  controller.abort("gone");
  await assert.rejects(waiting, (e) => e === "gone");
  release();
  assert.match(
    String((abortError(new AbortController().signal, "the read") as Error).message),
    /the read was aborted/,
  );
});

Deno.test("abortable() on a signal aborted already leaves its promise's own later rejection handled", async () => {
  const controller = new AbortController();
  controller.abort("cancelled by the client");
  // A read that fails once its stream is torn down by the same abort: nobody awaits it any more.
  const { promise: read, reject } = Promise.withResolvers<never>();
  await assert.rejects(abortable(read, [controller.signal]), (e) => e === "cancelled by the client");
  reject(new Error("the stream was aborted"));
  // An unhandled rejection would fail this test once the microtasks and this timer turn have run.
  await delay(0);
});

Deno.test("redact() replaces every occurrence of each secret and ignores empty ones", () => {
  assert.equal(
    redact("key sk-1 and sk-1, tok", ["sk-1", "", "tok"]),
    "key [redacted] and [redacted], [redacted]",
  );
});

Deno.test("shorten() cuts to max with a marker, on one line if asked, and leaves short text alone", () => {
  assert.equal(shorten("abc", 3), "abc");
  assert.equal(shorten("abcdef", 3), "abc…");
  assert.equal(shorten("a  b\n c  d", 5, { oneLine: true }), "a b c…");
  assert.equal(shorten("abcdef", 4, { withinMax: true }), "abc…");
  assert.equal(shorten("abcdef", 2, { marker: (n) => `…[${n} more chars]` }), "ab…[4 more chars]");
});
