import assert from "node:assert/strict";
import { messageField, readJsonBody } from "../src/http/body.ts";
import { HttpError, toHttpError } from "../src/http/errors.ts";
import { SessionError } from "../src/errors.ts";

const URL_ = "http://localhost/v1/sessions/s/turns";
const LIMIT = 65_536;

/** The body's `message` field, as the turn routes read it. */
const readMessageField = async (request: Request, options: { maxBytes: number }) =>
  messageField(await readJsonBody(request, options));

function post(
  body: BodyInit | null,
  headers: Record<string, string> = { "content-type": "application/json" },
) {
  return new Request(URL_, { method: "POST", headers, body });
}

/** Bytes of a JSON document exactly `size` bytes long: `{"message":"xxx…"}`. */
function jsonOfSize(size: number): Uint8Array<ArrayBuffer> {
  const text = `{"message":"${"x".repeat(size - 14)}"}`;
  assert.equal(text.length, size);
  return new TextEncoder().encode(text);
}

/** A body stream that produces `chunkSize`-byte chunks on demand, up to `maxChunks`, counting pulls. */
function countingStream(chunkSize: number, maxChunks: number) {
  const state = { pulls: 0, cancelled: false, cancelReason: undefined as unknown };
  const stream = new ReadableStream<Uint8Array>({
    pull(controller) {
      state.pulls++;
      if (state.pulls > maxChunks) controller.close();
      else controller.enqueue(new Uint8Array(chunkSize).fill(0x20));
    },
    cancel(reason) {
      state.cancelled = true;
      state.cancelReason = reason;
    },
  }, { highWaterMark: 0 });
  return { stream, state };
}

/** Asserts `promise` rejects with an HttpError of this status and code, and returns it. */
async function rejectsWith(promise: Promise<unknown>, status: number, code: string): Promise<HttpError> {
  const error = await promise.then(
    () => assert.fail(`expected an HttpError ${status}`),
    (error: unknown) => error,
  );
  assert.ok(error instanceof HttpError, `expected an HttpError, got ${error}`);
  assert.equal(error.status, status, error.message);
  assert.equal(error.code, code);
  return error;
}

Deno.test("readJsonBody() accepts a body of exactly maxBytes and rejects maxBytes + 1 with 413", async () => {
  const exact = jsonOfSize(LIMIT);
  const request = post(exact, { "content-type": "application/json", "content-length": String(LIMIT) });
  const body = await readJsonBody(request, { maxBytes: LIMIT }) as { message: string };
  assert.equal(body.message.length, LIMIT - 14);

  const over = jsonOfSize(LIMIT + 1);
  const error = await rejectsWith(
    readJsonBody(post(over, { "content-type": "application/json", "content-length": String(LIMIT + 1) }), {
      maxBytes: LIMIT,
    }),
    413,
    "payload_too_large",
  );
  assert.equal(error.message, `Cannot read request body: it is ${LIMIT + 1} bytes, the limit is ${LIMIT}`);
});

Deno.test("readJsonBody() rejects a too-large Content-Length unread and cancels the body", async () => {
  const { stream, state } = countingStream(1024, 1000);
  const request = post(stream, { "content-type": "application/json", "content-length": "70000" });
  const error = await rejectsWith(readJsonBody(request, { maxBytes: LIMIT }), 413, "payload_too_large");
  assert.equal(error.message, "Cannot read request body: it is 70000 bytes, the limit is 65536");
  assert.equal(state.pulls, 0, "no chunk was pulled");
  assert.ok(state.cancelled);
});

Deno.test("readJsonBody() stops a body without Content-Length as soon as it passes maxBytes", async () => {
  const { stream, state } = countingStream(4096, 1000);
  const request = post(stream);
  assert.equal(request.headers.get("content-length"), null);
  const error = await rejectsWith(readJsonBody(request, { maxBytes: LIMIT }), 413, "payload_too_large");
  assert.equal(
    error.message,
    `Cannot read request body: it is at least ${LIMIT + 4096} bytes, the limit is ${LIMIT}`,
  );
  assert.ok(state.cancelled, "the stream was cancelled");
  // 16 chunks reach the limit exactly, the 17th passes it; a few more may be pulled ahead, never all 1000.
  assert.ok(state.pulls >= 17 && state.pulls < 25, `pulled ${state.pulls} chunks`);
});

Deno.test("readJsonBody() counts the bytes it receives, not a lying smaller Content-Length", async () => {
  const { stream, state } = countingStream(8192, 100);
  const request = post(stream, { "content-type": "application/json", "content-length": "10" });
  await rejectsWith(readJsonBody(request, { maxBytes: LIMIT }), 413, "payload_too_large");
  assert.ok(state.cancelled);
  assert.ok(state.pulls < 100, `pulled ${state.pulls} chunks`);
});

Deno.test("readJsonBody() answers 415 for a missing or non-JSON Content-Type", async () => {
  const text = await rejectsWith(
    readJsonBody(post('{"message":"hi"}', { "content-type": "text/plain" }), { maxBytes: LIMIT }),
    415,
    "unsupported_media_type",
  );
  assert.equal(
    text.message,
    "Cannot read request body: Content-Type is text/plain, expected application/json",
  );

  const missing = new Request(URL_, { method: "POST", body: new TextEncoder().encode('{"message":"hi"}') });
  assert.equal(missing.headers.get("content-type"), null);
  const error = await rejectsWith(readJsonBody(missing, { maxBytes: LIMIT }), 415, "unsupported_media_type");
  assert.match(error.message, /Content-Type is missing/);

  await rejectsWith(
    readJsonBody(post("{}", { "content-type": "application/jsonx" }), { maxBytes: LIMIT }),
    415,
    "unsupported_media_type",
  );
  const withCharset = post('{"message":"hi"}', { "content-type": "Application/JSON; charset=utf-8" });
  assert.deepEqual(await readJsonBody(withCharset, { maxBytes: LIMIT }), { message: "hi" });
});

Deno.test("readJsonBody() answers 400 for an empty body, invalid UTF-8 and malformed JSON", async () => {
  const empty = await rejectsWith(readJsonBody(post(null), { maxBytes: LIMIT }), 400, "invalid_json");
  assert.equal(empty.message, "Cannot parse request body as JSON: it is empty");
  await rejectsWith(readJsonBody(post(""), { maxBytes: LIMIT }), 400, "invalid_json");

  const utf8 = await rejectsWith(
    readJsonBody(post(new Uint8Array([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x7d])), { maxBytes: LIMIT }),
    400,
    "invalid_json",
  );
  assert.equal(utf8.message, "Cannot parse request body as JSON: it is not valid UTF-8");

  const malformed = await rejectsWith(readJsonBody(post("{"), { maxBytes: LIMIT }), 400, "invalid_json");
  let parserMessage = "";
  try {
    JSON.parse("{");
  } catch (error) {
    parserMessage = (error as Error).message;
  }
  assert.equal(malformed.message, `Cannot parse request body as JSON: ${parserMessage}`);
  assert.ok(malformed.cause instanceof SyntaxError);
});

Deno.test("messageField() of a read body returns the message untrimmed, decoded across chunks", async () => {
  const bytes = new TextEncoder().encode(JSON.stringify({ message: " what is 12*(3+4)? 你好 ", extra: 1 }));
  const stream = new ReadableStream<Uint8Array>({
    start(controller) {
      // Split inside a multi-byte character: decoding must happen once, over the whole body.
      for (let i = 0; i < bytes.length; i += 5) controller.enqueue(bytes.slice(i, i + 5));
      controller.close();
    },
  });
  assert.equal(await readMessageField(post(stream), { maxBytes: LIMIT }), " what is 12*(3+4)? 你好 ");
});

Deno.test("messageField() of a read body answers 400 invalid_body naming what is wrong with the body", async () => {
  const cases: [string, string][] = [
    ["[]", "Cannot read message: the request body must be a JSON object, got array"],
    ["null", "Cannot read message: the request body must be a JSON object, got null"],
    ['"hi"', "Cannot read message: the request body must be a JSON object, got string"],
    ["{}", 'Cannot read message: field "message" is missing'],
    ['{"message": 3}', 'Cannot read message: field "message" must be a string, got number'],
    ['{"message": null}', 'Cannot read message: field "message" must be a string, got null'],
    ['{"message": "  \\n\\t"}', 'Cannot read message: field "message" is empty'],
    ['{"message": ""}', 'Cannot read message: field "message" is empty'],
  ];
  for (const [body, message] of cases) {
    const error = await rejectsWith(readMessageField(post(body), { maxBytes: LIMIT }), 400, "invalid_body");
    assert.equal(error.message, message, body);
  }
  await rejectsWith(readMessageField(post("{"), { maxBytes: LIMIT }), 400, "invalid_json");
});

Deno.test("readJsonBody() cancels with 408 when no chunk arrives for idleTimeoutMs", async () => {
  let cancelled = false;
  const stream = new ReadableStream<Uint8Array>({
    start(controller) {
      controller.enqueue(new TextEncoder().encode('{"message":'));
    },
    cancel() {
      cancelled = true;
    },
  });
  // Timers fire in the order they fall due: a 25 ms one set first has fired by the time the 50 ms idle wait
  // ends; a read that gave up without waiting would end before it.
  let fired = false;
  const shorter = setTimeout(() => (fired = true), 25);
  let error: HttpError;
  try {
    error = await rejectsWith(
      readJsonBody(post(stream), { maxBytes: LIMIT, idleTimeoutMs: 50 }),
      408,
      "request_timeout",
    );
    assert.equal(fired, true, "the read waited for data before it gave up");
  } finally {
    clearTimeout(shorter);
  }
  assert.equal(error.message, "Cannot read request body: no data arrived for 50 ms");
  assert.ok(cancelled);
});

Deno.test("readJsonBody() rejects with the signal's reason when it aborts, not with a 400", async () => {
  const controller = new AbortController();
  let cancelled = false;
  const stream = new ReadableStream<Uint8Array>({
    start(c) {
      c.enqueue(new TextEncoder().encode("{"));
    },
    cancel() {
      cancelled = true;
    },
  });
  const reading = readJsonBody(post(stream), { maxBytes: LIMIT, signal: controller.signal });
  setTimeout(() => controller.abort(), 10);
  await assert.rejects(
    reading,
    (error: unknown) => error instanceof DOMException && error.name === "AbortError",
  );
  assert.ok(cancelled);

  const gone = new AbortController();
  gone.abort(new DOMException("The request has been cancelled.", "AbortError"));
  const request = new Request(URL_, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: "{}",
    signal: gone.signal,
  });
  await assert.rejects(
    readJsonBody(request, { maxBytes: LIMIT }),
    (error: unknown) => error === gone.signal.reason,
  );
});

Deno.test("readJsonBody() turns a failing body stream into an AbortError", async () => {
  const failure = new Error("connection closed before message completed");
  const stream = new ReadableStream<Uint8Array>({
    pull(controller) {
      controller.error(failure);
    },
  });
  await assert.rejects(readJsonBody(post(stream), { maxBytes: LIMIT }), (error: unknown) => {
    assert.ok(error instanceof DOMException);
    assert.equal(error.name, "AbortError");
    assert.equal((error as { cause?: unknown }).cause, failure);
    return true;
  });
});

Deno.test("readJsonBody() rejects bad options with a RangeError", async () => {
  await assert.rejects(readJsonBody(post("{}"), { maxBytes: -1 }), RangeError);
  await assert.rejects(readJsonBody(post("{}"), { maxBytes: 1.5 }), RangeError);
  await assert.rejects(readJsonBody(post("{}"), { maxBytes: 10, idleTimeoutMs: 0 }), RangeError);
});

async function handle(request: Request): Promise<Response> {
  try {
    const message = await readMessageField(request, { maxBytes: LIMIT });
    return Response.json({ length: message.length });
  } catch (error) {
    if (error instanceof HttpError) return error.response();
    throw error;
  }
}

Deno.test("readJsonBody() behind Deno.serve answers 1 MB with 413 and a small body with 200", async () => {
  await using server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, handle);
  const url = `http://127.0.0.1:${server.addr.port}/`;
  const big = jsonOfSize(1024 * 1024);
  const response = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: big,
  });
  assert.equal(response.status, 413);
  assert.equal(response.headers.get("content-type"), "application/json; charset=utf-8");
  assert.deepEqual(await response.json(), {
    error: {
      code: "payload_too_large",
      message: `Cannot read request body: it is ${1024 * 1024} bytes, the limit is ${LIMIT}`,
    },
  });

  const ok = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: '{"message":"hello"}',
  });
  assert.equal(ok.status, 200);
  assert.deepEqual(await ok.json(), { length: 5 });
});

Deno.test("readJsonBody() behind Deno.serve stops a chunked upload past the limit", async () => {
  await using server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, handle);
  let pulls = 0;
  const upload = new ReadableStream<Uint8Array>({
    pull(controller) {
      // 256 chunks of 4 KiB would be 1 MB; the server stops reading long before.
      if (++pulls > 256) controller.close();
      else controller.enqueue(new Uint8Array(4096).fill(0x20));
    },
  });
  const response = await fetch(`http://127.0.0.1:${server.addr.port}/`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: upload,
  });
  assert.equal(response.status, 413);
  const { error } = await response.json();
  assert.equal(error.code, "payload_too_large");
  const [, received] = /^Cannot read request body: it is at least (\d+) bytes, the limit is 65536$/.exec(
    error.message,
  )!;
  // The server holds at most the limit plus the one chunk that passed it, never the whole upload.
  assert.ok(Number(received) > LIMIT && Number(received) <= LIMIT + 65_536, `received ${received} bytes`);
});

Deno.test("readJsonBody() behind Deno.serve rejects with AbortError when the client leaves", async () => {
  const { promise: outcome, resolve } = Promise.withResolvers<unknown>();
  const { promise: reading, resolve: read } = Promise.withResolvers<void>();
  await using server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
    read();
    try {
      resolve(await readJsonBody(request, { maxBytes: LIMIT }));
    } catch (error) {
      resolve(error);
    }
    return new Response(null, { status: 204 });
  });
  const connection = await Deno.connect({ hostname: "127.0.0.1", port: server.addr.port });
  const head =
    "POST / HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n";
  await connection.write(new TextEncoder().encode(head + '{"message": "half'));
  // The client leaves once the handler has the request, while its body is still read.
  await reading;
  connection.close();
  const error = await outcome;
  assert.ok(error instanceof DOMException, `expected a DOMException, got ${error}`);
  assert.equal(error.name, "AbortError");
});

Deno.test("HttpError.response() answers with the error's status, JSON body and extra headers", async () => {
  const error = new HttpError(429, "too_many_requests", "Cannot queue turn: busy", {
    headers: { "Retry-After": "3" },
    cause: new Error("internal detail"),
  });
  assert.equal(error.name, "HttpError");
  assert.ok(error instanceof Error);
  const response = error.response();
  assert.equal(response.status, 429);
  assert.equal(response.headers.get("retry-after"), "3");
  assert.equal(response.headers.get("content-type"), "application/json; charset=utf-8");
  const text = await response.text();
  assert.deepEqual(JSON.parse(text), {
    error: { code: "too_many_requests", message: "Cannot queue turn: busy" },
  });
  assert.ok(!text.includes("internal detail"), "the cause is never sent");
  assert.throws(() => new HttpError(200, "ok", "not an error"), RangeError);
});

Deno.test("HttpError.response() keeps the given headers but always sends JSON", async () => {
  const response = new HttpError(404, "not_found", "Cannot find session", {
    headers: { "content-type": "text/html", "x-a": "1" },
  }).response();
  assert.equal(response.status, 404);
  assert.equal(response.headers.get("content-type"), "application/json; charset=utf-8");
  assert.equal(response.headers.get("x-a"), "1");
  assert.deepEqual(await response.json(), { error: { code: "not_found", message: "Cannot find session" } });
});

Deno.test("toHttpError() maps session errors, aborts and unknown failures, logging only the unknown", () => {
  const logs: string[] = [];
  const log = (line: string) => logs.push(line);
  const known = new HttpError(429, "too_many_requests", "busy");
  assert.equal(toHttpError(known, log), known);
  const invalid = toHttpError(new SessionError("Invalid session id", "invalid_id"), log);
  assert.deepEqual([invalid.status, invalid.code], [400, "invalid_session_id"]);
  const retry = toHttpError(new SessionError("Cannot retry", "nothing_to_retry"), log);
  assert.deepEqual([retry.status, retry.code], [409, "nothing_to_retry"]);
  const gone = toHttpError(new DOMException("gone", "AbortError"), log);
  assert.deepEqual([gone.status, gone.code], [499, "client_closed_request"]);
  assert.deepEqual(logs, []);
  const internal = toHttpError(new Error("secret detail"), log);
  assert.deepEqual(internal.body(), { code: "internal", message: "Internal server error" });
  assert.equal(logs.length, 1);
  assert.match(logs[0], /^error: Error: secret detail/);
});
