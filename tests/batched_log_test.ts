import assert from "node:assert/strict";
import { BatchedLog } from "../src/http/batched_log.ts";

/**
 * A log's writes, and `next()`: the next write, as a promise, so a test waits on the write itself. Its
 * failsafe timer fails a write that never comes, and keeps the event loop running meanwhile (the log's own
 * timer is unref'd).
 */
function recorder(): { writes: string[]; write: (text: string) => void; next: () => Promise<string> } {
  const writes: string[] = [];
  let waiting: ((text: string) => void) | undefined;
  return {
    writes,
    write(text) {
      writes.push(text);
      waiting?.(text);
      waiting = undefined;
    },
    next: () =>
      new Promise((resolve, reject) => {
        const failsafe = setTimeout(() => reject(new Error("no write within 10 s")), 10_000);
        waiting = (text) => {
          clearTimeout(failsafe);
          resolve(text);
        };
      }),
  };
}

Deno.test("BatchedLog writes the lines of one flush period together, in order, once the period is over", async () => {
  const { writes, write, next } = recorder();
  const log = new BatchedLog(write, { flushMs: 30 });
  try {
    const first = next();
    log.line("GET /healthz 200 0ms");
    log.line("POST /v1/sessions/a/messages 200 104ms");
    log.line("error: something");
    assert.deepEqual(writes, [], "nothing is written before the period ends");
    assert.equal(
      await first,
      "GET /healthz 200 0ms\nPOST /v1/sessions/a/messages 200 104ms\nerror: something\n",
    );
    const second = next();
    log.line("next");
    assert.equal(writes.length, 1, "a later line waits for a period of its own");
    assert.equal(await second, "next\n");
    assert.deepEqual(writes.slice(1), ["next\n"], "a later line starts a new period");
  } finally {
    log.close();
  }
});

Deno.test("BatchedLog writes at once when the buffer is full, on flush() and after close()", () => {
  const writes: string[] = [];
  const log = new BatchedLog((text) => writes.push(text), { flushMs: 60_000, maxBufferedChars: 10 });
  log.line("1234");
  log.line("5678"); // 10 characters with the newlines
  assert.deepEqual(writes, ["1234\n5678\n"]);
  log.line("a");
  log.flush();
  assert.deepEqual(writes.slice(1), ["a\n"]);
  log.flush();
  assert.equal(writes.length, 2, "an empty flush writes nothing");
  log.line("b");
  log.close();
  assert.deepEqual(writes.slice(2), ["b\n"], "close() flushes");
  log.line("after");
  assert.deepEqual(writes.slice(3), ["after\n"], "once closed, a line is written at once");
  // The ops sanitizer checks that no timer is left running.
});

Deno.test("BatchedLog writes an urgent line at once, after the lines buffered before it", () => {
  const writes: string[] = [];
  const log = new BatchedLog((text) => writes.push(text), { flushMs: 60_000 });
  log.line("GET /a 200 1ms");
  log.line("error: boom", true);
  assert.deepEqual(writes, ["GET /a 200 1ms\nerror: boom\n"]);
  log.line("GET /b 200 1ms");
  assert.equal(writes.length, 1, "a request line after it waits again");
  log.close();
  assert.deepEqual(writes.slice(1), ["GET /b 200 1ms\n"]);
});

Deno.test("BatchedLog drops a batch whose write fails and goes on with the next", () => {
  const writes: string[] = [];
  let fail = true;
  const log = new BatchedLog((text) => {
    if (fail) throw new Error("EPIPE");
    writes.push(text);
  }, { flushMs: 60_000 });
  log.line("lost");
  assert.doesNotThrow(() => log.flush());
  fail = false;
  log.line("kept");
  log.close();
  assert.deepEqual(writes, ["kept\n"]);
});

Deno.test("BatchedLog refuses a flush period or buffer size that is not positive", () => {
  assert.throws(() => new BatchedLog(() => {}, { flushMs: 0 }), /flushMs must be positive, got 0/);
  assert.throws(
    () => new BatchedLog(() => {}, { maxBufferedChars: -1 }),
    /maxBufferedChars must be positive/,
  );
});
