/**
 * The OpenAI-compatible routes through the official `openai` client against a real server on 127.0.0.1:
 * plain and streamed completions (bodies checked against OpenAI's published schema), sessions kept by id or
 * not kept at all, the models, and errors surfacing as the client's own error classes.
 */
import assert from "node:assert/strict";
import { CLIENT_INSTRUCTIONS_HEADER, SYSTEM_PROMPT } from "../src/agent/context.ts";
import { MAX_STEPS_ANSWER } from "../src/agent/loop.ts";
import { LlmError } from "../src/errors.ts";
import type { LLM } from "../src/llm/llm.ts";
import { ScriptedLLM } from "../src/llm/scripted.ts";
import { readTrace } from "../src/trace/trace.ts";
import type { Message } from "../src/types.ts";
import { Ajv2020, OpenAI } from "./_dev_deps.ts";
import { keyOf } from "./_harness.ts";
import { type HttpHarness, httpHarness, until, withServer } from "./_http_harness.ts";
import { OPENAPI } from "./_openai_stubs.ts";

const ajv = new Ajv2020({ strict: false, validateFormats: false, allErrors: true });
ajv.addSchema(JSON.parse(Deno.readTextFileSync(OPENAPI)), "openai");
const completionSchema = ajv.getSchema("openai#/components/schemas/CreateChatCompletionResponse")!;
const chunkSchema = ajv.getSchema("openai#/components/schemas/CreateChatCompletionStreamResponse")!;

function assertValid(validate: typeof completionSchema, body: unknown): void {
  // Through JSON: what was on the wire, without the client's own non-enumerable additions.
  assert.ok(
    validate(JSON.parse(JSON.stringify(body))),
    `${ajv.errorsText(validate.errors)}\n${JSON.stringify(body)}`,
  );
}

const TOKENS = [{ token: "tok-alice-0123456789", userId: "alice" }, {
  token: "tok-bob-9876543210",
  userId: "bob",
}];

/** A client of the server at `url`, without retries (a test sees the first answer). */
function client(url: string, apiKey = "no-auth-configured"): OpenAI {
  return new OpenAI({ apiKey, baseURL: `${url}/v1`, maxRetries: 0 });
}

const ask = (content: string) => [{ role: "user" as const, content }];

/** Records the messages of every model call, then lets the harness's model answer. */
function recordRequests(h: HttpHarness): Message[][] {
  const seen: Message[][] = [];
  const inner = h.deps.agent.llm;
  const recording: LLM = {
    chat: (messages, options) => (seen.push(structuredClone(messages)), inner.chat(messages, options)),
  };
  h.deps.agent.llm = recording;
  return seen;
}

Deno.test("chat.completions.create() runs one agent turn, tools on the server, and gets a chat.completion", async () => {
  using h = httpHarness();
  await withServer(h, async ({ url }) => {
    const completion = await client(url).chat.completions.create({
      model: "mini-agent",
      messages: ask("what is 12*7?"),
    });
    assertValid(completionSchema, completion);
    assert.equal(completion.object, "chat.completion");
    assert.equal(completion.model, "mini-agent");
    assert.equal(completion.choices.length, 1);
    assert.equal(completion.choices[0].message.role, "assistant");
    assert.equal(completion.choices[0].message.content, "The answer is 84.");
    assert.equal(completion.choices[0].finish_reason, "stop");
    // Two model calls (the calculator call, then the answer), summed.
    assert.deepEqual(completion.usage, { prompt_tokens: 20, completion_tokens: 4, total_tokens: 24 });
    const trace = readTrace(h.tracePath);
    assert.equal(completion.id, `chatcmpl-${trace[0].run_id}`);
    assert.deepEqual(trace.map((e) => e.event), [
      "run_start",
      "llm_call",
      "tool_call",
      "tool_result",
      "llm_call",
      "answer",
      "run_end",
    ]);
  });
});

Deno.test("without a session id nothing is kept: the client's messages are the history of a private session", async () => {
  using h = httpHarness();
  const seen = recordRequests(h);
  await withServer(h, async ({ url }) => {
    const completion = await client(url).chat.completions.create({
      model: "mini-agent",
      messages: [
        { role: "system", content: "Answer in French." },
        { role: "user", content: "hi" },
        { role: "assistant", content: "echo: hi" },
        { role: "user", content: [{ type: "text", text: "again" }] },
      ],
    });
    assert.equal(completion.choices[0].message.content, "echo: again");
  });
  assert.deepEqual(seen[0].map(({ role, content }) => ({ role, content })), [
    { role: "system", content: SYSTEM_PROMPT },
    { role: "system", content: `${CLIENT_INSTRUCTIONS_HEADER}\n\nAnswer in French.` },
    { role: "user", content: "hi" },
    { role: "assistant", content: "echo: hi" },
    { role: "user", content: "again" },
  ]);
  assert.deepEqual(await h.store.listSessions("local"), [], "nothing in the configured database");
  assert.equal(h.ephemeral.length, 1);
  assert.equal(await h.ephemeral[0].ping(), false, "the private store is closed");
  const trace = readTrace(h.tracePath);
  assert.match(trace[0].session_id, /^ephemeral-/);
  assert.ok(trace.every((e) => e.user_id === "local" && e.session_id === trace[0].session_id));
});

Deno.test("without a session id the todo tool writes to the private store, never the configured one", async () => {
  using h = httpHarness();
  h.deps.agent.llm = new ScriptedLLM([
    { toolCalls: [{ name: "todo", arguments: { action: "add", text: "buy milk" } }] },
    { content: "Added." },
  ]);
  await withServer(h, async ({ url }) => {
    const completion = await client(url).chat.completions.create({
      model: "mini-agent",
      messages: ask("add milk"),
    });
    assert.equal(completion.choices[0].message.content, "Added.");
  });
  const trace = readTrace(h.tracePath);
  const result = trace.find((e) => e.event === "tool_result")!;
  assert.equal(result.data.ok, true, JSON.stringify(result.data));
  assert.deepEqual(await h.store.listTodos(keyOf(trace[0].session_id, "local")), []);
  assert.deepEqual(await h.store.listSessions("local"), []);
});

Deno.test("with X-Session-Id the session is stored and only the last user message is the new turn", async () => {
  using h = httpHarness();
  const seen = recordRequests(h);
  await withServer(h, async ({ url }) => {
    const openai = client(url);
    const headers = { "X-Session-Id": "oa-1" };
    const first = await openai.chat.completions.create({
      model: "mini-agent",
      messages: ask("my name is Ada"),
    }, {
      headers,
    });
    assert.equal(first.choices[0].message.content, "echo: my name is Ada");
    // A client that sends the whole conversation again: only its last message is new.
    const second = await openai.chat.completions.create({
      model: "mini-agent",
      messages: [
        { role: "system", content: "Be brief." },
        ...ask("my name is Ada"),
        { role: "assistant", content: "echo: my name is Ada" },
        ...ask("what is my name?"),
      ],
    }, { headers });
    assert.equal(second.choices[0].message.content, "echo: what is my name?");
    // The same session through metadata.session_id.
    await openai.chat.completions.create({
      model: "mini-agent",
      messages: ask("third"),
      metadata: { session_id: "oa-1" },
    });
  });
  const stored = await h.store.messages(keyOf("oa-1", "local"));
  assert.deepEqual(stored.map((m) => `${m.role}: ${m.content}`), [
    "user: my name is Ada",
    "assistant: echo: my name is Ada",
    "user: what is my name?",
    "assistant: echo: what is my name?",
    "user: third",
    "assistant: echo: third",
  ]);
  assert.equal((await h.store.get(keyOf("oa-1", "local")))!.turnCount, 3);
  // The second call read the stored history, with the client's system message marked and not stored.
  assert.deepEqual(seen[1].map((m) => m.content), [
    SYSTEM_PROMPT,
    `${CLIENT_INSTRUCTIONS_HEADER}\n\nBe brief.`,
    "my name is Ada",
    "echo: my name is Ada",
    "what is my name?",
  ]);
  assert.deepEqual(h.ephemeral, []);
});

Deno.test("stream: true yields chat.completion.chunk events: role, content deltas, finish, usage", async () => {
  using h = httpHarness();
  await withServer(h, async ({ url }) => {
    const stream = await client(url).chat.completions.create({
      model: "mini-agent",
      messages: ask("what is 12*7?"),
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const chunk of stream) {
      assertValid(chunkSchema, chunk);
      chunks.push(chunk);
    }
    const runId = readTrace(h.tracePath)[0].run_id;
    assert.ok(chunks.every((c) => c.id === `chatcmpl-${runId}` && c.object === "chat.completion.chunk"));
    assert.deepEqual(chunks[0].choices[0].delta, { role: "assistant", content: "" });
    const contents = chunks.flatMap((c) => c.choices.map((choice) => choice.delta.content ?? ""));
    assert.ok(contents.filter((c) => c !== "").length > 1, "the answer arrives in several deltas");
    assert.equal(contents.join(""), "The answer is 84.");
    const finish = chunks.at(-2)!;
    assert.equal(finish.choices[0].finish_reason, "stop");
    assert.deepEqual(finish.choices[0].delta, {});
    const usage = chunks.at(-1)!;
    assert.deepEqual(usage.choices, []);
    assert.deepEqual(usage.usage, { prompt_tokens: 20, completion_tokens: 4, total_tokens: 24 });
    assert.ok(chunks.slice(0, -1).every((c) => c.usage === null));
  });
});

Deno.test("a streamed answer ends with data: [DONE], and has no usage without include_usage", async () => {
  using h = httpHarness();
  await withServer(h, async ({ url }) => {
    const response = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "mini-agent", messages: ask("hello"), stream: true }),
    });
    assert.equal(response.status, 200);
    assert.match(response.headers.get("content-type")!, /^text\/event-stream/);
    const frames = (await response.text()).split("\n\n").filter((f) => f !== "");
    assert.equal(frames.at(-1), "data: [DONE]");
    const chunks = frames.slice(0, -1).map((f) => JSON.parse(f.replace(/^data: /, "")));
    for (const chunk of chunks) assertValid(chunkSchema, chunk);
    assert.ok(chunks.every((c) => !("usage" in c)));
    assert.equal(chunks.map((c) => c.choices[0].delta.content ?? "").join(""), "echo: hello");
  });
});

Deno.test("a turn that reaches its step limit finishes with finish_reason length", async () => {
  using h = httpHarness();
  h.deps.agent.maxSteps = 1;
  await withServer(h, async ({ url }) => {
    const openai = client(url);
    const completion = await openai.chat.completions.create({
      model: "mini-agent",
      messages: ask("what is 2+2?"),
    });
    assert.equal(completion.choices[0].finish_reason, "length");
    assert.equal(completion.choices[0].message.content, MAX_STEPS_ANSWER);
    const stream = await openai.chat.completions.create({
      model: "mini-agent",
      messages: ask("what is 2+2?"),
      stream: true,
    });
    let text = "";
    let finish = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.equal(text, MAX_STEPS_ANSWER, "a model that does not stream: the answer comes whole");
    assert.equal(finish, "length");
  });
});

Deno.test("bearer tokens map to users; a bad token is the client's AuthenticationError", async () => {
  using h = httpHarness({ tokens: TOKENS });
  await withServer(h, async ({ url }) => {
    for (
      const call of [
        (c: OpenAI) => c.chat.completions.create({ model: "mini-agent", messages: ask("hi") }),
        (c: OpenAI) => c.models.list(),
      ]
    ) {
      const error = await call(client(url, "tok-nobody-000000000")).then(() => null, (e) => e);
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
      const error = await call().then(() => null, (e) => e);
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
      const error = await openai.chat.completions.create({ model: "mini-agent", ...body } as never).then(
        () => null,
        (e) => e,
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
    const error = await openai.chat.completions.create(request, { headers }).then(() => null, (e) => e);
    assert.ok(error instanceof OpenAI.InternalServerError, String(error));
    assert.equal(error.status, 502);
    assert.equal(error.type, "server_error");
    assert.equal(error.code, "llm_error");
    assert.match(error.message, /HTTP 500 from provider\.test; send the same message again to retry/);
    const stream = await openai.chat.completions.create({ ...request, stream: true });
    const streamed = await (async () => {
      for await (const _ of stream) { /* until the error frame */ }
    })().then(() => null, (e) => e);
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

Deno.test("a streaming client that goes away aborts its turn, and nothing of it is kept", async () => {
  using h = httpHarness();
  h.llm.hold = true;
  await withServer(h, async ({ url }) => {
    const stream = await client(url).chat.completions.create(
      { model: "mini-agent", messages: ask("hello"), stream: true },
      { headers: { "X-Session-Id": "oa-gone" } },
    );
    for await (const chunk of stream) {
      assert.equal(chunk.choices[0].delta.role, "assistant");
      break; // The client stops reading and closes the connection.
    }
    await until(() => h.llm.aborted === 1, "the model call to be aborted");
    await until(() => h.deps.queue.size === 0, "the turn to end");
  });
  assert.deepEqual(await h.store.messages(keyOf("oa-gone", "local")), []);
  const errors = readTrace(h.tracePath).filter((e) => e.event === "error");
  assert.equal(errors[0]?.data.kind, "aborted");
});

Deno.test("a session with its queue full answers 429, the client's RateLimitError", async () => {
  using h = httpHarness({ maxWaiting: 0 });
  h.llm.hold = true;
  await withServer(h, async ({ url }) => {
    const openai = client(url);
    const headers = { "X-Session-Id": "oa-busy" };
    const first = openai.chat.completions.create({ model: "mini-agent", messages: ask("one") }, { headers });
    await until(() => h.llm.calls === 1, "the first turn to reach the model");
    const error = await openai.chat.completions.create({ model: "mini-agent", messages: ask("two") }, {
      headers,
    })
      .then(() => null, (e) => e);
    assert.ok(error instanceof OpenAI.RateLimitError, String(error));
    assert.equal(error.code, "rate_limit_exceeded");
    h.llm.release();
    assert.equal((await first).choices[0].message.content, "echo: one");
  });
});
