/**
 * The OpenAI-compatible routes through the official `openai` client against a real server on 127.0.0.1:
 * plain and streamed completions (bodies checked against OpenAI's published schema), sessions kept by id or
 * not kept at all, the models, and errors surfacing as the client's own error classes.
 */
import assert from "node:assert/strict";
import { CLIENT_INSTRUCTIONS_HEADER, SYSTEM_PROMPT } from "../src/agent/context.ts";
import { MAX_STEPS_ANSWER } from "../src/agent/loop.ts";
import type { LLM } from "../src/llm/llm.ts";
import { ScriptedLLM } from "../src/llm/scripted.ts";
import { readTrace } from "../src/trace/trace.ts";
import type { Message } from "../src/types.ts";
import { keyOf } from "./_harness.ts";
import { type HttpHarness, httpHarness, until, withServer } from "./_http_harness.ts";
import { ask, assertValid, client } from "./_openai_client.ts";

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
    assertValid("completion", completion);
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
  assert.equal(h.requestTodos.length, 1, "one private session, its todos in memory");
  const trace = readTrace(h.tracePath);
  assert.match(trace[0].session_id, /^ephemeral-/);
  assert.ok(trace.every((e) => e.user_id === "local" && e.session_id === trace[0].session_id));
});

Deno.test("without a session id the todo tool writes to the request's private todos, never the configured store", async () => {
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
  const key = keyOf(trace[0].session_id, "local");
  assert.deepEqual(await h.store.listTodos(key), []);
  assert.deepEqual(await h.store.listSessions("local"), []);
  assert.deepEqual((await h.requestTodos[0].listTodos(key)).map((t) => t.text), ["buy milk"]);
});

Deno.test("a long history without a session id starts no background compaction of the dropped session", async () => {
  using h = httpHarness();
  const started: string[] = [];
  const { compactions } = h.deps.agent;
  const start = compactions.start.bind(compactions);
  compactions.start = (key, job) => (started.push(key.sessionId), start(key, job));
  // More raw turns than AGENT_MAX_RAW_TURNS (20) plus a batch (10): a kept session would compact after this.
  const history = Array.from({ length: 40 }, (_, i) => [
    { role: "user" as const, content: `question ${i}` },
    { role: "assistant" as const, content: `echo: question ${i}` },
  ]).flat();
  await withServer(h, async ({ url }) => {
    const completion = await client(url).chat.completions.create({
      model: "mini-agent",
      messages: [...history, ...ask("last")],
    });
    assert.equal(completion.choices[0].message.content, "echo: last");
  });
  await compactions.idle();
  assert.deepEqual(started, []);
  assert.ok(readTrace(h.tracePath).every((e) => e.event !== "compact"));
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
  assert.deepEqual(h.requestTodos, []);
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
      assertValid("chunk", chunk);
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
    for (const chunk of chunks) assertValid("chunk", chunk);
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
    await until(() => h.deps.sessions.size === 0, "the turn to end");
  });
  assert.deepEqual(await h.store.messages(keyOf("oa-gone", "local")), []);
  const errors = readTrace(h.tracePath).filter((e) => e.event === "error");
  assert.equal(errors[0]?.data.kind, "aborted");
});

Deno.test("/openapi.json documents the chat completions and models routes, errors in OpenAI's shape", async () => {
  using h = httpHarness();
  const doc = await (await h.handler(new Request("http://agent.test/openapi.json"))).json();
  const post = doc.paths["/v1/chat/completions"].post;
  assert.equal(
    post.requestBody.content["application/json"].schema.$ref,
    "#/components/schemas/ChatCompletionRequest",
  );
  assert.ok(post.responses["200"].content["text/event-stream"]);
  assert.equal(doc.paths["/v1/chat/completions"].parameters[0].name, "X-Session-Id");
  for (const status of ["400", "401", "404", "429", "502"]) {
    assert.equal(
      post.responses[status].content["application/json"].schema.$ref,
      "#/components/schemas/OpenAIError",
    );
  }
  assert.ok(doc.paths["/v1/models"].get && doc.paths["/v1/models/{model}"].get);
  assert.deepEqual(doc.components.schemas.OpenAIError.properties.error.required, [
    "message",
    "type",
    "param",
    "code",
  ]);
});
