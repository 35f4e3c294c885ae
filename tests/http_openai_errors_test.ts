/**
 * How the OpenAI-compatible routes fail: each failure as the official client's error class with OpenAI's
 * `{"error": {"message", "type", "param", "code"}}` body, on every path of the routes (405 and shutdown too),
 * before anything runs or is stored; and what a stream says when its turn cannot finish.
 */
import assert from "node:assert/strict";
import { LlmError } from "../src/errors.ts";
import { ScriptedLLM } from "../src/llm/scripted.ts";
import { keyOf } from "./_harness.ts";
import { httpHarness, until, withServer } from "./_http_harness.ts";
import { ask, assertValid, client, OpenAI, rejection } from "./_openai_client.ts";

const TOKENS = [{ token: "tok-alice-0123456789", userId: "alice" }, {
  token: "tok-bob-9876543210",
  userId: "bob",
}];

/** A Chat Completions request to the handler, `body` as JSON unless a string. */
function completions(body: unknown, headers: Record<string, string> = {}): Request {
  return new Request("http://agent.test/v1/chat/completions", {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
}

/**
 * The response's OpenAI error object, checked to have exactly OpenAI's four fields (plus, for a turn that ran,
 * its run id and whether the session kept it).
 */
async function openaiError(response: Response): Promise<Record<string, unknown>> {
  const { error, ...rest } = await response.json();
  assert.deepEqual(rest, {});
  const keys = Object.keys(error).filter((k) => k !== "run_id" && k !== "turn_kept").sort();
  assert.deepEqual(keys, ["code", "message", "param", "type"], JSON.stringify(error));
  return error;
}

Deno.test("bearer tokens map to users; a bad token is the client's AuthenticationError", async () => {
  using h = httpHarness({ tokens: TOKENS });
  await withServer(h, async ({ url }) => {
    for (
      const call of [
        (c: OpenAI) => c.chat.completions.create({ model: "mini-agent", messages: ask("hi") }),
        (c: OpenAI) => c.models.list(),
      ]
    ) {
      const error = await rejection(call(client(url, "tok-nobody-000000000")));
      assert.ok(error instanceof OpenAI.AuthenticationError, String(error));
      assert.equal(error.status, 401);
      assert.equal(error.type, "invalid_request_error");
      assert.equal(error.code, "invalid_api_key");
      assert.doesNotMatch(error.message, /tok-/);
    }
    const headers = { "X-Session-Id": "shared" };
    await client(url, TOKENS[0].token).chat.completions.create({ model: "mini-agent", messages: ask("a") }, {
      headers,
    });
    await client(url, TOKENS[1].token).chat.completions.create({ model: "mini-agent", messages: ask("b") }, {
      headers,
    });
  });
  assert.deepEqual((await h.store.messages(keyOf("shared", "alice"))).map((m) => m.content), [
    "a",
    "echo: a",
  ]);
  assert.deepEqual((await h.store.messages(keyOf("shared", "bob"))).map((m) => m.content), ["b", "echo: b"]);
  assert.ok(!Deno.readTextFileSync(h.tracePath).includes("tok-"));
});

Deno.test("models.list() and models.retrieve() know mini-agent alone; another model is NotFoundError", async () => {
  using h = httpHarness();
  await withServer(h, async ({ url }) => {
    const openai = client(url);
    const models = [];
    for await (const model of openai.models.list()) models.push(model);
    assert.deepEqual(models.map((m) => [m.id, m.object]), [["mini-agent", "model"]]);
    assert.equal((await openai.models.retrieve("mini-agent")).id, "mini-agent");
    for (
      const call of [
        () => openai.models.retrieve("gpt-4o"),
        () => openai.chat.completions.create({ model: "gpt-4o", messages: ask("hi") }),
      ]
    ) {
      const error = await rejection(call());
      assert.ok(error instanceof OpenAI.NotFoundError, String(error));
      assert.equal(error.code, "model_not_found");
      assert.match(error.message, /The model `gpt-4o` does not exist/);
    }
  });
});

Deno.test("invalid requests are the client's BadRequestError naming the parameter", async () => {
  using h = httpHarness();
  await withServer(h, async ({ url }) => {
    const openai = client(url);
    const cases: [Record<string, unknown>, string, RegExp][] = [
      [{ messages: [] }, "messages", /non-empty array/],
      [
        { messages: [...ask("hi"), { role: "assistant", content: "x" }] },
        "messages[1]",
        /last message must be a user/,
      ],
      [{ messages: ask("   ") }, "messages[0]", /user message with text/],
      [
        {
          messages: ask("hi"),
          tools: [{ type: "function", function: { name: "f", parameters: {} } }],
        },
        "tools",
        /runs its own tools/,
      ],
      [
        { messages: [{ role: "tool", content: "{}", tool_call_id: "c" }, ...ask("hi")] },
        "messages[0].role",
        /tool/,
      ],
      [
        {
          messages: [{
            role: "user",
            content: [{ type: "image_url", image_url: { url: "http://x/y.png" } }],
          }],
        },
        "messages[0].content[0]",
        /text only/,
      ],
    ];
    for (const [body, param, message] of cases) {
      const error = await rejection(
        openai.chat.completions.create({ model: "mini-agent", ...body } as never),
      );
      assert.ok(error instanceof OpenAI.BadRequestError, `${JSON.stringify(body)}: ${error}`);
      assert.equal(error.param, param, JSON.stringify(body));
      assert.equal(error.type, "invalid_request_error");
      assert.match(error.message, message);
    }
  });
  assert.equal(h.llm.calls, 0);
  assert.deepEqual(await h.store.listSessions("local"), []);
});

Deno.test("a model failure is a 502 InternalServerError; sending the same message again retries the turn", async () => {
  using h = httpHarness();
  h.llm.fail = new LlmError("LLM request failed: HTTP 500 from provider.test", { kind: "http", status: 500 });
  await withServer(h, async ({ url }) => {
    const openai = client(url);
    const request = { model: "mini-agent", messages: ask("what is 6*7?") };
    const headers = { "X-Session-Id": "oa-fail" };
    const error = await rejection(openai.chat.completions.create(request, { headers }));
    assert.ok(error instanceof OpenAI.InternalServerError, String(error));
    assert.equal(error.status, 502);
    assert.equal(error.type, "server_error");
    assert.equal(error.code, "llm_error");
    assert.match(error.message, /HTTP 500 from provider\.test; send the same message again to retry/);
    const stream = await openai.chat.completions.create({ ...request, stream: true });
    const streamed = await rejection((async () => {
      for await (const _ of stream) { /* until the error frame */ }
    })());
    assert.ok(streamed instanceof OpenAI.APIError, String(streamed));
    assert.match(streamed.message, /HTTP 500 from provider\.test/);

    h.llm.fail = null;
    const retried = await openai.chat.completions.create(request, { headers });
    assert.equal(retried.choices[0].message.content, "The answer is 42.");
  });
  const stored = await h.store.messages(keyOf("oa-fail", "local"));
  assert.equal(stored.filter((m) => m.role === "user").length, 1, "the question is stored once");
  assert.equal((await h.store.get(keyOf("oa-fail", "local")))!.turnCount, 1);
});

Deno.test("the official client with its default retries asks once for a turn that failed after it ran, and the error says the session kept it", async () => {
  for (const session of ["oa-kept", null]) {
    using h = httpHarness();
    h.llm.fail = new LlmError("LLM request failed: HTTP 500 from provider.test", {
      kind: "http",
      status: 500,
    });
    await withServer(h, async ({ url }) => {
      // The client's defaults: two retries of a 5xx, unless the server says not to.
      const openai = new OpenAI({ apiKey: "no-auth-configured", baseURL: `${url}/v1`, timeout: 30_000 });
      const headers = session === null ? {} : { "X-Session-Id": session };
      const request = { model: "mini-agent", messages: ask("what is 6*7?") };
      const error = await rejection(openai.chat.completions.create(request, { headers }));
      assert.ok(error instanceof OpenAI.InternalServerError, String(error));
      assert.equal(error.headers.get("x-should-retry"), "false");
      assert.equal((error.error as { turn_kept: boolean }).turn_kept, session !== null);
    });
    assert.equal(h.llm.calls, 1, "one request, one turn, one model call");
  }
});

Deno.test("an error before any work is still the client's to retry: a full queue's 429 has no x-should-retry", async () => {
  using h = httpHarness({ maxWaiting: 0 });
  h.llm.hold = true;
  const first = h.handler(
    completions({ model: "mini-agent", messages: ask("one") }, { "x-session-id": "q" }),
  );
  await until(() => h.llm.calls === 1, "the first turn to reach the model");
  const second = await h.handler(
    completions({ model: "mini-agent", messages: ask("two") }, { "x-session-id": "q" }),
  );
  assert.equal(second.status, 429);
  assert.equal(second.headers.get("x-should-retry"), null);
  assert.equal((await openaiError(second)).turn_kept, undefined);
  h.llm.release();
  assert.equal((await first).status, 200);
});

Deno.test("a session with its queue full answers 429, the client's RateLimitError", async () => {
  using h = httpHarness({ maxWaiting: 0 });
  h.llm.hold = true;
  await withServer(h, async ({ url }) => {
    const openai = client(url);
    const headers = { "X-Session-Id": "oa-busy" };
    const first = openai.chat.completions.create({ model: "mini-agent", messages: ask("one") }, { headers });
    await until(() => h.llm.calls === 1, "the first turn to reach the model");
    const error = await rejection(
      openai.chat.completions.create({ model: "mini-agent", messages: ask("two") }, { headers }),
    );
    assert.ok(error instanceof OpenAI.RateLimitError, String(error));
    assert.equal(error.code, "rate_limit_exceeded");
    h.llm.release();
    assert.equal((await first).choices[0].message.content, "echo: one");
  });
});

Deno.test("every failure on these paths has OpenAI's error shape: 400, 401, 404, 405, 413, 415, 503", async () => {
  using h = httpHarness({ tokens: TOKENS, maxBodyBytes: 2000 });
  const auth = { authorization: `Bearer ${TOKENS[0].token}` };
  const cases: [Request, number, Record<string, unknown>][] = [
    [completions("{not json", auth), 400, {
      type: "invalid_request_error",
      code: "invalid_json",
      param: null,
    }],
    [completions({ messages: ask("hi") }, auth), 400, { code: "missing_required_parameter", param: "model" }],
    [completions({ model: "mini-agent", messages: ask("hi"), n: 2 }, auth), 400, { param: "n" }],
    [completions({ model: "mini-agent", messages: ask("hi"), stream: "yes" }, auth), 400, {
      param: "stream",
    }],
    [
      completions({ model: "mini-agent", messages: ask("hi") }, { ...auth, "x-session-id": "bad id" }),
      400,
      { code: "invalid_session_id", param: null },
    ],
    [
      completions({ model: "mini-agent", messages: ask("hi"), metadata: { session_id: "a/b" } }, auth),
      400,
      { code: "invalid_session_id", param: "metadata.session_id" },
    ],
    [completions({ model: "mini-agent", messages: ask("hi") }), 401, { code: "invalid_api_key" }],
    [new Request("http://agent.test/v1/models/gpt-4o", { headers: auth }), 404, { code: "model_not_found" }],
    [new Request("http://agent.test/v1/chat/completions", { headers: auth }), 405, {
      code: "method_not_allowed",
    }],
    [completions({ model: "mini-agent", messages: ask("x".repeat(3000)) }, auth), 413, {
      code: "payload_too_large",
    }],
    [completions("{}", { ...auth, "content-type": "text/plain" }), 415, { code: "unsupported_media_type" }],
  ];
  for (const [request, status, expected] of cases) {
    const response = await h.handler(request);
    assert.equal(response.status, status, `${request.method} ${request.url}`);
    const error = await openaiError(response);
    for (const [key, value] of Object.entries(expected)) {
      assert.equal(error[key], value, JSON.stringify(error));
    }
  }
  assert.equal(
    (await h.handler(new Request("http://agent.test/v1/chat/completions"))).headers.get("allow"),
    "POST",
  );
  h.setShuttingDown(true);
  const closing = await h.handler(completions({ model: "mini-agent", messages: ask("hi") }, auth));
  assert.equal(closing.status, 503);
  assert.equal(closing.headers.get("retry-after"), "5");
  assert.equal((await openaiError(closing)).type, "server_error");
  assert.equal(h.llm.calls, 0);
  assert.deepEqual(await h.store.listSessions("alice"), []);
  // The sessions API keeps its own shape.
  h.setShuttingDown(false);
  const own = await (await h.handler(new Request("http://agent.test/v1/sessions"))).json();
  assert.deepEqual(Object.keys(own.error).sort(), ["code", "message"]);
});

Deno.test("a turn cut short by the shutdown is a 503, as JSON and as the stream's last frame", async () => {
  using h = httpHarness();
  h.llm.hold = true;
  const json = h.handler(completions({ model: "mini-agent", messages: ask("one") }));
  const streamed = await h.handler(completions({ model: "mini-agent", messages: ask("two"), stream: true }));
  await until(() => h.llm.calls === 2, "both turns to reach the model");
  h.shutdown.abort();
  const response = await json;
  assert.equal(response.status, 503);
  // The turn had asked the model already: a client's own retry would ask it again.
  assert.equal(response.headers.get("x-should-retry"), "false");
  const error = await openaiError(response);
  assert.equal(error.code, "shutting_down");
  assert.equal(error.turn_kept, false);
  const frames = (await streamed.text()).split("\n\n").filter((f) => f !== "");
  assert.equal(JSON.parse(frames[0].slice(6)).choices[0].delta.role, "assistant");
  assert.equal(JSON.parse(frames.at(-1)!.slice(6)).error.code, "shutting_down");
  assert.ok(!frames.includes("data: [DONE]"));
});

Deno.test("text the model writes before calling tools streams too, a blank line before the answer", async () => {
  using h = httpHarness();
  h.deps.agent.llm = new ScriptedLLM([
    {
      content: "Let me compute.",
      deltas: ["Let me ", "compute."],
      toolCalls: [{ name: "calculator", arguments: { expression: "12*7" } }],
    },
    { content: "It is 84.", deltas: ["It is ", "84."] },
  ]);
  await withServer(h, async ({ url }) => {
    const openai = client(url);
    const stream = await openai.chat.completions.create({
      model: "mini-agent",
      messages: ask("12*7?"),
      stream: true,
    });
    const pieces: string[] = [];
    for await (const chunk of stream) {
      assertValid("chunk", chunk);
      pieces.push(chunk.choices[0]?.delta.content ?? "");
    }
    assert.deepEqual(pieces.filter((p) => p !== ""), ["Let me ", "compute.", "\n\nIt is ", "84."]);
    // Whole, the message is the answer alone; the provider reported no usage, so the counts are 0.
    h.deps.agent.llm = new ScriptedLLM([{ content: "It is 84." }]);
    const completion = await openai.chat.completions.create({ model: "mini-agent", messages: ask("12*7?") });
    assertValid("completion", completion);
    assert.equal(completion.choices[0].message.content, "It is 84.");
    assert.deepEqual(completion.usage, { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 });
  });
});
