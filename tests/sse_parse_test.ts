import { fc } from "./_fast_check.ts";
import assert from "node:assert/strict";
import { type SseEvent, SseParser, type SseParserOptions } from "../src/llm/stream.ts";
import { cutBytes } from "./_openai_stubs.ts";

const encoder = new TextEncoder();

function bytes(chunk: string | Uint8Array): Uint8Array {
  return typeof chunk === "string" ? encoder.encode(chunk) : chunk;
}

/** The events of `chunks` pushed one by one into a fresh parser, then ended. */
function parse(chunks: (string | Uint8Array)[], options?: SseParserOptions): SseEvent[] {
  const parser = new SseParser(options);
  const events = chunks.flatMap((chunk) => parser.push(bytes(chunk)));
  return [...events, ...parser.end()];
}

const data = (text: string): SseEvent => ({ event: null, data: text });

Deno.test("SseParser dispatches one event per blank line", () => {
  assert.deepEqual(parse(["data: one\n\ndata: two\n\n"]), [data("one"), data("two")]);
});

Deno.test("SseParser joins a line split across chunks, at every split point", () => {
  const text = "data: hello world\n\n";
  for (let i = 0; i <= text.length; i++) {
    assert.deepEqual(parse([text.slice(0, i), text.slice(i)]), [data("hello world")], `split at ${i}`);
  }
});

Deno.test("SseParser decodes a multi-byte UTF-8 character split across chunks", () => {
  const all = encoder.encode("data: né 🌍 日本\n\n");
  for (let i = 0; i <= all.length; i++) {
    assert.deepEqual(parse([all.slice(0, i), all.slice(i)]), [data("né 🌍 日本")], `split at byte ${i}`);
  }
  // One byte per chunk: every character arrives in pieces.
  assert.deepEqual(parse(cutBytes(all, [...all.keys()])), [data("né 🌍 日本")]);
});

Deno.test("SseParser accepts \\r\\n, \\r and \\n line ends, mixed", () => {
  assert.deepEqual(parse(["data: a\r\n\r\ndata: b\r\rdata: c\n\ndata: d\r\n\n"]), [
    data("a"),
    data("b"),
    data("c"),
    data("d"),
  ]);
});

Deno.test("SseParser treats \\r\\n split between chunks as one line end, not a blank line", () => {
  assert.deepEqual(parse(["data: a\r", "\ndata: b\r\n\r\n"]), [data("a\nb")]);
  assert.deepEqual(parse(["data: a\r", "", "\ndata: b\r", "\n\r", "\n"]), [data("a\nb")]);
  // A \r\n split inside a multi-byte character's chunk boundary still counts once.
  const tail = encoder.encode("\ndata: é\r\n\r\n");
  assert.deepEqual(parse(["data: a\r", tail.slice(0, 9), tail.slice(9)]), [data("a\né")]);
});

Deno.test("SseParser skips comment lines", () => {
  assert.deepEqual(parse([": keep-alive\n\n:\ndata: x\n: inside\ndata: y\n\n"]), [data("x\ny")]);
});

Deno.test("SseParser reads a field without a space after the colon and strips only one space", () => {
  assert.deepEqual(parse(["data:x\n\ndata:  two spaces\n\ndata:\n\n"]), [
    data("x"),
    data(" two spaces"),
    data(""),
  ]);
});

Deno.test("SseParser joins multi-line data with \\n and keeps empty data lines", () => {
  assert.deepEqual(parse(["data: line 1\ndata:\ndata: line 3\n\n"]), [data("line 1\n\nline 3")]);
});

Deno.test("SseParser names events with event: and resets the name after each dispatch", () => {
  assert.deepEqual(parse(["event: error\ndata: {}\n\ndata: plain\n\nevent: a\nevent: b\ndata: z\n\n"]), [
    { event: "error", data: "{}" },
    data("plain"),
    { event: "b", data: "z" },
  ]);
});

Deno.test("SseParser does not dispatch an event without data, and forgets its name", () => {
  assert.deepEqual(parse(["event: ping\n\n\n\ndata: x\n\n"]), [data("x")]);
});

Deno.test("SseParser ignores id:, retry:, unknown fields and a line without a colon", () => {
  assert.deepEqual(parse(["id: 7\nretry: 1000\nfoo: bar\nid\ndata: x\nrandom\n\n"]), [data("x")]);
  // A line without a colon is a field named by the whole line with an empty value.
  assert.deepEqual(parse(["data\n\n"]), [data("")]);
});

Deno.test("SseParser dispatches a final event without its blank line, even without a line end", () => {
  assert.deepEqual(parse(["data: a\n\ndata: [DONE]\n"]), [data("a"), data("[DONE]")]);
  assert.deepEqual(parse(["data: a\n\ndata: [DONE]"]), [data("a"), data("[DONE]")]);
  assert.deepEqual(parse(["data: a\n\ndata: [DO", "NE]"]), [data("a"), data("[DONE]")]);
});

Deno.test("SseParser drops an unterminated final event when dispatchAtEnd is false, as the spec says", () => {
  const options = { dispatchAtEnd: false };
  assert.deepEqual(parse(["data: a\n\ndata: [DONE]\n"], options), [data("a")]);
  assert.deepEqual(parse(["data: a\n\ndata: [DONE]"], options), [data("a")]);
  assert.deepEqual(parse(["data: a\n\n"], options), [data("a")]);
});

Deno.test("SseParser drops a leading byte order mark", () => {
  assert.deepEqual(parse([new Uint8Array([0xef, 0xbb]), new Uint8Array([0xbf]), "data: x\n\n"]), [data("x")]);
});

Deno.test("SseParser turns invalid UTF-8 into U+FFFD and keeps going", () => {
  assert.deepEqual(parse([new Uint8Array([0x64, 0x61, 0x74, 0x61, 0x3a, 0xff, 0x0a, 0x0a]), "data: y\n\n"]), [
    data("\ufffd"),
    data("y"),
  ]);
});

Deno.test("SseParser returns nothing after end() and rejects further bytes", () => {
  const parser = new SseParser();
  assert.deepEqual(parser.push(bytes("data: x\n\n")), [data("x")]);
  assert.deepEqual(parser.end(), []);
  assert.deepEqual(parser.end(), []);
  assert.throws(() => parser.push(bytes("data: y\n\n")), TypeError);
});

/** A random event stream: fields, comments, every line end, multi-byte text. */
const LINE_ENDS = ["\n", "\r\n", "\r"];
const TEXT = fc.string({
  unit: fc.constantFrom("a", "b", " ", ":", "é", "🌍", "日", "{", '"'),
  maxLength: 12,
});
const streamArbitrary = fc.array(
  fc.record({
    comment: fc.option(TEXT, { nil: undefined }),
    event: fc.option(fc.constantFrom("message", "error", "x"), { nil: undefined }),
    lines: fc.array(TEXT, { minLength: 1, maxLength: 3 }),
    ends: fc.array(fc.constantFrom(...LINE_ENDS), { minLength: 8, maxLength: 8 }),
  }),
  { maxLength: 8 },
).map((events) => {
  let text = "";
  const expected: SseEvent[] = [];
  for (const { comment, event, lines, ends } of events) {
    let end = 0;
    const line = (value: string) => (text += value + ends[end++ % ends.length]);
    if (comment !== undefined) line(`:${comment}`);
    if (event !== undefined) line(`event: ${event}`);
    for (const value of lines) line(`data: ${value}`);
    // The blank line repeats the previous line end: "\r" then "\n" would be one line end, not two.
    text += ends[(end - 1) % ends.length];
    expected.push({ event: event ?? null, data: lines.join("\n") });
  }
  return { text, expected };
});

Deno.test("SseParser gives the same events however the bytes are cut (property)", () => {
  fc.assert(
    fc.property(streamArbitrary, fc.array(fc.nat(), { maxLength: 40 }), ({ text, expected }, positions) => {
      const all = encoder.encode(text);
      const pieces = cutBytes(all, positions.map((p) => p % (all.length + 1)));
      assert.deepEqual(parse(pieces), expected);
    }),
    { numRuns: 300 },
  );
});

Deno.test("SseParser reads a body cut into chunks to its end, with and without dispatchAtEnd", () => {
  const all = encoder.encode("data: a\n\nevent: e\ndata: b\r\n\r\ndata: [DONE]");
  assert.deepEqual(parse(cutBytes(all, [3, 9, 10, 25])), [
    data("a"),
    { event: "e", data: "b" },
    data("[DONE]"),
  ]);
  assert.deepEqual(parse([all], { dispatchAtEnd: false }), [data("a"), { event: "e", data: "b" }]);
});
