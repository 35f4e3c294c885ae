/**
 * `Idempotency-Key` on `POST /v1/chat/completions`, through the real handler and the official client: a
 * repeat gets the first request's response without running the turn again (JSON and stream), per user; a
 * repeat with another body is refused, one while the first runs is told to retry; an error of a turn that ran
 * is kept like an answer, a request refused before any work or taken back frees its key.
 */
import assert from "node:assert/strict";
import { LlmError } from "../src/errors.ts";
import { answerOnce, MAX_KEPT_BYTES } from "../src/http/idempotency_key.ts";
import { SqliteStore } from "../src/store/sqlite.ts";
import { httpHarness, until, withServer } from "./_http_harness.ts";
import { ask, client, OpenAI, rejection } from "./_openai_client.ts";

const TOKENS = [
  { token: "tok-alice-0123456789", userId: "alice" },
  { token: "tok-bob-9876543210", userId: "bob" },
];

/** A Chat Completions request to the handler, `body` as JSON unless a string. */
function completions(body: unknown, headers: Record<string, string> = {}): Request {
  return new Request("http://agent.test/v1/chat/completions", {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
}

const ONCE = { "Idempotency-Key": "k1" };

Deno.test("chat.completions.create() with an Idempotency-Key sent twice runs one turn; the repeat is the same completion, marked replayed", async () => {
  using h = httpHarness();
  await withServer(h, async ({ url }) => {
    const openai = client(url);
    const request = { model: "mini-agent" as const, messages: ask("what is 12*7?") };
    const first = await openai.chat.completions.create(request, { headers: ONCE }).withResponse();
    assert.equal(h.llm.calls, 2, "the calculator call, then the answer");
    const again = await openai.chat.completions.create(request, { headers: ONCE }).withResponse();
    assert.equal(h.llm.calls, 2, "no second turn");
    assert.deepEqual(again.data, first.data);
    assert.equal(again.data.choices[0].message.content, "The answer is 84.");
    assert.equal(first.response.headers.get("idempotent-replayed"), null);
    assert.equal(again.response.headers.get("idempotent-replayed"), "true");
    assert.match(again.response.headers.get("content-type")!, /^application\/json/);
    // Another key is another request.
    await openai.chat.completions.create(request, { headers: { "Idempotency-Key": "k2" } });
    assert.equal(h.llm.calls, 4);
  });
});

Deno.test("a streamed request with an Idempotency-Key sent twice runs one turn; the repeat replays the stream's text at once", async () => {
  using h = httpHarness();
  const body = { model: "mini-agent", messages: ask("what is 6*7?"), stream: true };
  const first = await h.handler(completions(body, ONCE));
  assert.equal(first.status, 200);
  const text = await first.text();
  assert.match(text, /"content":"42\."/);
  assert.ok(text.endsWith("data: [DONE]\n\n"), text);
  const again = await h.handler(completions(body, ONCE));
  assert.equal(again.status, 200);
  assert.equal(again.headers.get("idempotent-replayed"), "true");
  assert.match(again.headers.get("content-type")!, /^text\/event-stream/);
  assert.equal(await again.text(), text);
  assert.equal(h.llm.calls, 2, "one turn");

  await withServer(h, async ({ url }) => {
    const stream = await client(url).chat.completions.create(
      { model: "mini-agent", messages: ask("what is 6*7?"), stream: true },
      { headers: ONCE },
    );
    let content = "";
    for await (const chunk of stream) content += chunk.choices[0]?.delta?.content ?? "";
    assert.equal(content, "The answer is 42.", "the official client reads the replayed stream");
  });
  assert.equal(h.llm.calls, 2);
});

Deno.test("the same Idempotency-Key with another body is a 422 idempotency_key_reused, the client's UnprocessableEntityError", async () => {
  using h = httpHarness();
  await withServer(h, async ({ url }) => {
    const openai = client(url);
    await openai.chat.completions.create({ model: "mini-agent", messages: ask("one") }, { headers: ONCE });
    const error = await rejection(
      openai.chat.completions.create({ model: "mini-agent", messages: ask("two") }, { headers: ONCE }),
    );
    assert.ok(error instanceof OpenAI.UnprocessableEntityError, String(error));
    assert.equal(error.code, "idempotency_key_reused");
    assert.equal(error.type, "invalid_request_error");
    assert.match(error.message, /Idempotency-Key was used .* another body/);
    // The session the request continues is part of what it asks.
    const other = await rejection(
      openai.chat.completions.create({ model: "mini-agent", messages: ask("one") }, {
        headers: { ...ONCE, "X-Session-Id": "s1" },
      }),
    );
    assert.ok(other instanceof OpenAI.UnprocessableEntityError, String(other));
  });
  assert.equal(h.llm.calls, 1);
});

Deno.test("Idempotency-Key is per user: another user's request with the same key runs its own turn", async () => {
  using h = httpHarness({ tokens: TOKENS });
  await withServer(h, async ({ url }) => {
    const [alice, bob] = [client(url, TOKENS[0].token), client(url, TOKENS[1].token)];
    const request = { model: "mini-agent" as const, messages: ask("hello") };
    const first = await alice.chat.completions.create(request, { headers: ONCE });
    const other = await bob.chat.completions.create(request, { headers: ONCE }).withResponse();
    assert.equal(h.llm.calls, 2, "one turn each");
    assert.notEqual(other.data.id, first.id);
    assert.equal(other.response.headers.get("idempotent-replayed"), null);
    const again = await bob.chat.completions.create(request, { headers: ONCE });
    assert.deepEqual(again, other.data);
    assert.equal(h.llm.calls, 2);
  });
});

Deno.test("a repeat while the first request runs is a 409 idempotency_key_in_use with Retry-After: 1; once it ends, its result", async () => {
  using h = httpHarness();
  h.llm.hold = true;
  const body = { model: "mini-agent", messages: ask("hello") };
  const first = h.handler(completions(body, ONCE));
  await until(() => h.llm.calls === 1, "the first turn to reach the model");
  const busy = await h.handler(completions(body, ONCE));
  assert.equal(busy.status, 409);
  assert.equal(busy.headers.get("retry-after"), "1");
  const { error } = await busy.json();
  assert.deepEqual([error.code, error.type, error.param], [
    "idempotency_key_in_use",
    "invalid_request_error",
    null,
  ]);
  assert.doesNotMatch(error.message, /k1/, "the key is not echoed");
  h.llm.release();
  const answered = await first;
  const text = await answered.text();
  const repeat = await h.handler(completions(body, ONCE));
  assert.equal(repeat.headers.get("idempotent-replayed"), "true");
  assert.equal(await repeat.text(), text);
  assert.equal(h.llm.calls, 1);
});

Deno.test("the official client with its default retries gets a held request's result: it retries the 409 until the first ends", async () => {
  using h = httpHarness();
  h.llm.hold = true;
  await withServer(h, async ({ url }) => {
    const openai = new OpenAI({ apiKey: "no-auth-configured", baseURL: `${url}/v1`, timeout: 30_000 });
    const request = { model: "mini-agent" as const, messages: ask("hello") };
    const first = openai.chat.completions.create(request, { headers: ONCE });
    await until(() => h.llm.calls === 1, "the first turn to reach the model");
    const repeat = openai.chat.completions.create(request, { headers: ONCE });
    await until(() => h.logs.some((line) => /^POST \/v1\/chat\/completions 409 /.test(line)), "a 409");
    h.llm.release();
    const [answered, repeated] = await Promise.all([first, repeat]);
    assert.deepEqual(repeated, answered);
    assert.equal(answered.choices[0].message.content, "echo: hello");
  });
  assert.equal(h.llm.calls, 1, "one turn");
});

Deno.test("an error of a turn that ran (the model's 500) is kept: the repeat replays the same 502 without a model call", async () => {
  using h = httpHarness();
  h.llm.fail = new LlmError("LLM request failed: HTTP 500 from provider.test", { kind: "http", status: 500 });
  for (const stream of [false, true]) {
    const body = { model: "mini-agent", messages: ask("what is 6*7?"), stream };
    const headers = { "Idempotency-Key": `fail-${stream}` };
    const first = await h.handler(completions(body, headers));
    const text = await first.text();
    const calls = h.llm.calls;
    const again = await h.handler(completions(body, headers));
    assert.equal(again.status, first.status);
    assert.equal(again.headers.get("content-type"), first.headers.get("content-type"));
    assert.equal(again.headers.get("x-should-retry"), "false");
    assert.equal(again.headers.get("idempotent-replayed"), "true");
    assert.equal(await again.text(), text);
    assert.equal(h.llm.calls, calls, "no model call");
    if (!stream) {
      assert.equal(first.status, 502);
      assert.equal(JSON.parse(text).error.code, "llm_error");
    } else {
      assert.match(text, /"code":"llm_error"/);
    }
  }
});

Deno.test("a request refused before any work frees its key: an invalid body, a full queue", async () => {
  using h = httpHarness({ maxWaiting: 0 });
  const invalid = await h.handler(completions({ model: "mini-agent", messages: [] }, ONCE));
  assert.equal(invalid.status, 400);
  const body = { model: "mini-agent", messages: ask("two") };
  h.llm.hold = true;
  const running = h.handler(
    completions({ model: "mini-agent", messages: ask("one") }, { "x-session-id": "q" }),
  );
  await until(() => h.llm.calls === 1, "the first turn to reach the model");
  const full = await h.handler(completions(body, { ...ONCE, "x-session-id": "q" }));
  assert.equal(full.status, 429);
  assert.equal((await full.json()).error.code, "rate_limit_exceeded");
  h.llm.release();
  assert.equal((await running).status, 200);
  const ran = await h.handler(completions(body, { ...ONCE, "x-session-id": "q" }));
  assert.equal(ran.status, 200);
  assert.equal(ran.headers.get("idempotent-replayed"), null, "the key was free: the request ran");
  assert.equal((await ran.json()).choices[0].message.content, "echo: two");
  assert.equal(h.llm.calls, 2);
});

Deno.test("a client that leaves a streamed request mid-turn frees its key: the turn is taken back, a repeat runs it", async () => {
  using h = httpHarness();
  h.llm.hold = true;
  await withServer(h, async ({ url }) => {
    const body = JSON.stringify({ model: "mini-agent", messages: ask("hello"), stream: true });
    const headers = { "content-type": "application/json", ...ONCE };
    const leave = new AbortController();
    const response = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers,
      body,
      signal: leave.signal,
    });
    await until(() => h.llm.calls === 1, "the turn to reach the model");
    leave.abort();
    await response.body?.cancel().catch(() => {});
    await until(() => h.llm.aborted === 1, "the turn to be aborted");
    h.llm.hold = false;
    let again: Response;
    for (;;) {
      // The claim is freed once the aborted turn has ended: until then a repeat is told it runs.
      again = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers, body });
      if (again.status !== 409) break;
      await again.body?.cancel();
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    assert.equal(again.status, 200);
    assert.equal(again.headers.get("idempotent-replayed"), null);
    assert.match(await again.text(), /echo: hello/);
  });
  assert.equal(h.llm.calls, 2);
});

Deno.test("a malformed Idempotency-Key is a 400 invalid_idempotency_key in OpenAI's shape naming the header", async () => {
  using h = httpHarness();
  for (const key of ["", "two words", "x".repeat(256)]) {
    const response = await h.handler(
      completions({ model: "mini-agent", messages: ask("hi") }, { "Idempotency-Key": key }),
    );
    assert.equal(response.status, 400);
    const { error } = await response.json();
    assert.deepEqual([error.code, error.type, error.param], [
      "invalid_idempotency_key",
      "invalid_request_error",
      null,
    ]);
    assert.match(error.message, /The Idempotency-Key header must be 1-255 visible ASCII characters/);
  }
  const longest = await h.handler(
    completions({ model: "mini-agent", messages: ask("hi") }, { "Idempotency-Key": "~".repeat(255) }),
  );
  assert.equal(longest.status, 200);
  assert.equal(h.llm.calls, 1);
});

Deno.test("answerOnce() keeps a response over the bound as a 422 idempotency_result_too_large, JSON or stream", async () => {
  const store = new SqliteStore(":memory:");
  try {
    for (const type of ["application/json", "text/event-stream"]) {
      const key = { userId: "alice", key: type };
      const once = { store, key, hash: "h", log: () => {}, maxKeptBytes: 10 };
      const big = "x".repeat(11);
      const first = await answerOnce(once, (didWork) => {
        didWork();
        return Promise.resolve(new Response(big, { headers: { "content-type": type } }));
      });
      assert.equal(await first.text(), big, "the first client gets it whole");
      const again = await answerOnce(once, () => Promise.reject(new Error("not run again")));
      assert.equal(again.status, 422);
      const { error } = await again.json();
      assert.equal(error.code, "idempotency_result_too_large");
      assert.match(error.message, /over 10 bytes and was not kept/);
    }
    assert.equal(MAX_KEPT_BYTES, 1_048_576);
  } finally {
    await store.close();
  }
});
