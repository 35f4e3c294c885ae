/**
 * No model reply can exhaust memory: the client counts a reply's bytes as they arrive and drops it at
 * `maxReplyBytes` (kind `too_large`, never retried), keeps only the start of an error body, and a turn
 * whose reply is too large ends in `error` with nothing of that reply stored.
 */
import assert from "node:assert/strict";
import { loadConfig } from "../src/config.ts";
import { createLlmFromConfig, HttpLLM } from "../src/llm/client.ts";
import { runTurn } from "../src/agent/loop.ts";
import { JsonlTracer, readTrace } from "../src/trace/trace.ts";
import { SqliteStore } from "../src/store/sqlite.ts";
import { BASE, HELLO, KEY, llmError, makeClient, MODEL, type Step, stubFetch } from "./_openai_stubs.ts";
import { harness, keyOf, tempDir } from "./_harness.ts";
import { endless, ok, startFaultProvider } from "./fixtures/fault_provider.ts";

const encoder = new TextEncoder();

/** An endless body as the stub fetch answers it. */
interface Endless {
  stream: ReadableStream<Uint8Array>;
  /** Bytes the client pulled. */
  pulled: () => number;
  cancelled: () => number;
}

/**
 * A body that sends `head`, then `piece` on every read; it breaks after `giveUpAt` bytes, so a client that
 * reads without limit fails the test instead of hanging it.
 */
function endlessBody(head: string, piece: string, giveUpAt = 64 * 1024 * 1024): Endless {
  let pulled = 0;
  let cancels = 0;
  const stream = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (pulled >= giveUpAt) return controller.error(new TypeError("the test body gave up: read too far"));
      const bytes = encoder.encode(pulled === 0 ? head : piece);
      pulled += bytes.byteLength;
      controller.enqueue(bytes);
    },
    cancel() {
      cancels++;
    },
  }, { highWaterMark: 0 });
  return { stream, pulled: () => pulled, cancelled: () => cancels };
}

function answer(source: Endless, status = 200, contentType = "application/json"): Step {
  return () =>
    Promise.resolve(new Response(source.stream, { status, headers: { "content-type": contentType } }));
}

const PIECE = "x".repeat(16 * 1024);
const JSON_HEAD = '{"choices":[{"index":0,"message":{"role":"assistant","content":"';
const SSE_PIECE = `data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: PIECE } }] })}\n\n`;

Deno.test("HttpLLM.chat() fails with too_large, without retry, on a JSON body past maxReplyBytes", async () => {
  const source = endlessBody(JSON_HEAD, PIECE);
  const { fetch, sent } = stubFetch(answer(source));
  const { llm, delays } = makeClient(fetch, { maxReplyBytes: 256 * 1024, retries: 2 });
  const error = await llmError(llm.chat(HELLO));
  assert.equal(error.kind, "too_large");
  assert.equal(error.retries, 0);
  assert.equal(
    error.message,
    "LLM reply from api.example.com is too large: it went past the limit of 262144 bytes",
  );
  assert.equal(sent.length, 1);
  assert.deepEqual(delays, []);
  // Read as it arrived: at most one piece past the limit, and the rest cancelled.
  assert.ok(source.pulled() <= 256 * 1024 + PIECE.length, `pulled ${source.pulled()} bytes`);
  assert.equal(source.cancelled(), 1);
});

Deno.test("HttpLLM.chat() rejects a whole 2 MiB completion under the default 1 MiB limit", async () => {
  const body = JSON.stringify({ choices: [{ message: { content: "y".repeat(2 * 1024 * 1024) } }] });
  const { fetch } = stubFetch(() => Promise.resolve(new Response(body)));
  const error = await llmError(makeClient(fetch).llm.chat(HELLO));
  assert.equal(error.kind, "too_large");
  assert.match(error.message, /past the limit of 1048576 bytes$/);
});

Deno.test("HttpLLM({stream: true}) drops an endless stream at maxReplyBytes with too_large", async () => {
  const source = endlessBody(SSE_PIECE, SSE_PIECE);
  const { fetch, sent } = stubFetch(answer(source, 200, "text/event-stream"));
  const { llm, delays } = makeClient(fetch, { stream: true, maxReplyBytes: 256 * 1024 });
  let shown = 0;
  const error = await llmError(llm.chat(HELLO, { onDelta: (text) => (shown += text.length) }));
  assert.equal(error.kind, "too_large");
  assert.equal(error.retries, 0);
  assert.match(error.message, /^LLM reply from api\.example\.com is too large: .* 262144 bytes$/);
  assert.equal(sent.length, 1);
  assert.deepEqual(delays, []);
  assert.ok(source.pulled() <= 256 * 1024 + SSE_PIECE.length, `pulled ${source.pulled()} bytes`);
  assert.ok(shown > 0 && shown <= 256 * 1024, `showed ${shown} characters`);
  assert.equal(source.cancelled(), 1);
});

Deno.test("HttpLLM({stream: true}) drops a JSON answer to a stream request past maxReplyBytes", async () => {
  const source = endlessBody(JSON_HEAD, PIECE);
  const { fetch } = stubFetch(answer(source));
  const { llm } = makeClient(fetch, { stream: true, maxReplyBytes: 64 * 1024 });
  const error = await llmError(llm.chat(HELLO, { onDelta: () => assert.fail("nothing is shown") }));
  assert.equal(error.kind, "too_large");
  assert.ok(source.pulled() <= 64 * 1024 + PIECE.length, `pulled ${source.pulled()} bytes`);
});

Deno.test("HttpLLM.chat() keeps only the first 16 KiB of an endless error body and quotes its start", async () => {
  for (const stream of [false, true]) {
    const source = endlessBody("<html><body>Bad gateway ", PIECE);
    const { fetch, sent } = stubFetch(answer(source, 502, "text/html"));
    const { llm } = makeClient(fetch, { stream, retries: 0 });
    const error = await llmError(llm.chat(HELLO));
    assert.equal(error.kind, "http", `stream: ${stream}`);
    assert.equal(error.status, 502);
    assert.match(
      error.message,
      /^LLM request failed: HTTP 502 from api\.example\.com: <html><body>Bad gateway x+…$/,
    );
    assert.equal(sent.length, 1);
    assert.ok(source.pulled() <= 16 * 1024 + PIECE.length, `pulled ${source.pulled()} bytes`);
    assert.equal(source.cancelled(), 1);
  }
});

Deno.test("createLlmFromConfig() applies LLM_MAX_REPLY_BYTES", async () => {
  const config = loadConfig({ OPENAI_BASE_URL: BASE, OPENAI_API_KEY: KEY, LLM_MAX_REPLY_BYTES: "2048" });
  const body = JSON.stringify({ choices: [{ message: { content: "z".repeat(4096) } }] });
  const { fetch } = stubFetch(() => Promise.resolve(new Response(body)));
  const error = await llmError(createLlmFromConfig(config, { fetch }).chat(HELLO));
  assert.equal(error.kind, "too_large");
  assert.match(error.message, /past the limit of 2048 bytes$/);
});

Deno.test("new HttpLLM() rejects a maxReplyBytes that is not a whole number of 1 or more", () => {
  const base = { baseUrl: BASE, model: MODEL };
  for (const bad of [0, -1, 1.5, Number.POSITIVE_INFINITY]) {
    assert.throws(
      () => new HttpLLM({ ...base, maxReplyBytes: bad }),
      RangeError,
      `maxReplyBytes ${bad}`,
    );
  }
  assert.throws(
    () => new HttpLLM({ ...base, maxReplyBytes: "1024" as unknown as number }),
    TypeError,
  );
});

Deno.test("runTurn() ends with error too_large on an endless reply, stores nothing of it, and the next turn is answered", async () => {
  for (const stream of [false, true]) {
    using dir = tempDir();
    const provider = startFaultProvider([endless()]);
    const config = loadConfig({
      OPENAI_BASE_URL: provider.url,
      OPENAI_API_KEY: KEY,
      LLM_MAX_REPLY_BYTES: "65536",
      LLM_RETRIES: "2",
      AGENT_TRACE_PATH: `${dir.path}/traces.jsonl`,
    });
    const store = new SqliteStore(`${dir.path}/sessions.db`);
    const tracer = new JsonlTracer(config.tracePath);
    using h = harness([], { store });
    const agent = { ...h.agent, llm: createLlmFromConfig(config, { stream }) };
    const emit = tracer.write.bind(tracer);
    // Bounds the wait on a client that would read forever: the turn then ends "aborted" and fails below.
    const guard = new AbortController();
    const timer = setTimeout(() => guard.abort(new Error("still reading after 20 s")), 20_000);
    try {
      const shown: string[] = [];
      const input = { sessionId: "big", userId: "u1", message: "tell me everything" };
      const result = await runTurn(input, agent, {
        ...h.run,
        emit,
        signal: guard.signal,
        onDelta: (text) => shown.push(text),
      });
      assert.equal(result.outcome, "error", `stream: ${stream}`);
      assert.match(result.answer, /too large: it went past the limit of 65536 bytes/);
      assert.equal(provider.requests.length, 1, "not retried");
      const errors = readTrace(config.tracePath, (e) => e.run_id === result.runId && e.event === "error");
      assert.deepEqual(errors.map((e) => [e.data.kind, e.data.retries]), [["too_large", 0]]);
      assert.deepEqual((await store.messages(keyOf("big", "u1"))).map((m) => [m.role, m.content]), [[
        "user",
        "tell me everything",
      ]]);
      if (stream) assert.ok(shown.length > 0, "the stream was shown as it came");

      provider.setScript([ok()]);
      const next = await runTurn({ ...input, message: "hello" }, agent, { ...h.run, emit });
      assert.equal(next.outcome, "answered");
      assert.equal(next.answer, "echo: hello");
    } finally {
      clearTimeout(timer);
      tracer.close();
      await store.close();
      await provider.close();
    }
  }
});
