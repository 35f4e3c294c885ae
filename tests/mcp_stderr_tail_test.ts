/** A stdio server's stderr as kept for its errors: the last lines, bounded, redacted, without escape codes. */
import assert from "node:assert/strict";
import { StderrTail } from "../src/mcp/stderr_tail.ts";
import { redact } from "../src/redact.ts";

const bytes = (text: string) => new TextEncoder().encode(text);

Deno.test("StderrTail keeps the last lines within its line and character bounds, a line split across chunks whole", () => {
  const tail = new StderrTail({ maxLines: 3, maxChars: 20 });
  tail.push(bytes("one\ntwo\nthr"));
  tail.push(bytes("ee\nfour\n"));
  assert.deepEqual(tail.lines(), ["two", "three", "four"]);
  tail.push(bytes("a much longer line\n"));
  assert.deepEqual(tail.lines(), ["a much longer line"]);
  tail.push(bytes("no newline yet"));
  assert.deepEqual(tail.lines(), ["a much longer line"]);
  tail.end();
  assert.deepEqual(tail.lines(), ["no newline yet"]);
});

Deno.test("StderrTail keeps a line that never ends in bounded pieces, and a character split across chunks", () => {
  const tail = new StderrTail({ maxLines: 2, maxChars: 8 });
  const euro = bytes("€");
  tail.push(euro.slice(0, 1));
  tail.push(euro.slice(1));
  tail.push(bytes("x".repeat(30)));
  tail.end();
  // "€" and 30 x: pieces of 8, 8, 8 and 7; the last alone fits in 8 characters.
  assert.deepEqual(tail.lines(), ["x".repeat(7)]);
  const first = new StderrTail();
  first.push(euro.slice(0, 2));
  first.push(euro.slice(2));
  first.end();
  assert.deepEqual(first.lines(), ["€"]);
});

Deno.test("StderrTail drops escape codes, carriage returns and blank lines", () => {
  const tail = new StderrTail();
  tail.push(bytes("\x1b[1;31merror\x1b[0m: boom\r\n\n   \n\x07bell\n"));
  tail.end();
  assert.deepEqual(tail.lines(), ["error: boom", "bell"]);
});

Deno.test("StderrTail takes out the secrets it is given, longest first, and what looks like a token; not a short flag value", () => {
  const tail = new StderrTail({ secrets: ["hunter22", "hunter22-extended", "1"] });
  tail.push(
    bytes("login hunter22-extended then hunter22 on port 1\nkey ghp_abcdefghijklmnopqrstuvwxyz0123\n"),
  );
  tail.end();
  assert.deepEqual(tail.lines(), ["login [redacted] then [redacted] on port 1", "key [redacted]"]);
});

Deno.test("redact() with tokenLike takes out key shapes, credentials after Bearer and after a secret's name, and long mixed runs", () => {
  const cases: [string, string][] = [
    ["using sk-ant-api03-abcdefghijklmnop", "using [redacted]"],
    ["xoxb-1234567890-abcdef and AKIAIOSFODNN7EXAMPLE", "[redacted] and [redacted]"],
    ["Authorization: Bearer abc.def-123", "Authorization: Bearer [redacted]"],
    ["api_key=s3cr3t-v4lue failed", "api_key=[redacted] failed"],
    ['{"password": "hunter22"}', '{"password": "[redacted]"}'],
    ["id 0123456789abcdef0123456789abcdef01 seen", "id [redacted] seen"],
    ["eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig", "[redacted]"],
  ];
  for (const [text, expected] of cases) assert.equal(redact(text, [], { tokenLike: true }), expected, text);
  const plain = "Error: GITHUB_TOKEN is not set; see file:///srv/app/main.ts:3:9 and the key: set";
  assert.equal(redact(plain, [], { tokenLike: true }), plain);
  assert.equal(redact("Bearer abc.def-123", []), "Bearer abc.def-123");
});
