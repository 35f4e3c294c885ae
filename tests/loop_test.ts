import assert from "node:assert/strict";
import { LlmError } from "../src/errors.ts";
import { EMPTY_ANSWER, EMPTY_REPLY_NUDGE, MAX_STEPS_ANSWER, runTurn } from "../src/agent/loop.ts";
import { NOT_STARTED_ERROR } from "../src/agent/tool_calls.ts";
import { ScriptedLLM } from "../src/llm/scripted.ts";
import { SqliteStore } from "../src/store/sqlite.ts";
import { harness, keyOf, lastToolResult, steppingClock, tempDir } from "./_harness.ts";

const input = (message: string, sessionId = "s1") => ({ sessionId, userId: "u1", message });

Deno.test("runTurn() answers 84 for 12*(3+4) from the calculator's result", async () => {
  using h = harness([
    { toolCalls: [{ name: "calculator", arguments: { expression: "12*(3+4)" } }] },
    ({ messages }) => {
      const result = lastToolResult(messages);
      assert.equal(result.ok, true);
      return { content: `The answer is ${(result.data as { result: number }).result}.` };
    },
  ]);
  const result = await runTurn(input("what is 12*(3+4)?"), h.agent, h.run);
  assert.equal(result.outcome, "answered");
  assert.equal(result.answer, "The answer is 84.");
  assert.equal(result.turn, 1);
  assert.deepEqual(result.toolCalls, [{
    name: "calculator",
    arguments: '{"expression":"12*(3+4)"}',
    ok: true,
  }]);
  const stored = await h.store.messages(keyOf("s1", "u1"));
  assert.deepEqual(stored.map((m) => m.role), ["user", "assistant", "tool", "assistant"]);
  assert.equal(stored[2].toolCallId, stored[1].toolCalls![0].id);
  assert.deepEqual(
    h.events.map((e) => e.event),
    ["run_start", "llm_call", "tool_call", "tool_result", "llm_call", "answer", "run_end"],
  );
  assert.ok(h.events.every((e) => e.run_id === result.runId && e.turn === 1 && e.session_id === "s1"));
  assert.deepEqual(
    [...new Set(h.events.map((e) => e.user_id))],
    ["u1"],
    "every event names the session's user",
  );
  // The second request carries the call and its result right after the user message.
  const second = h.llm.requests[1].messages;
  assert.deepEqual(second.map((m) => m.role), ["system", "user", "assistant", "tool"]);
  assert.deepEqual(h.llm.requests[0].tools.map((t) => t.name), ["calculator", "search_mock", "todo"]);
});

Deno.test("runTurn() keeps two users' turns on one session id apart: history, turn numbers, todos", async () => {
  using h = harness([
    { toolCalls: [{ name: "todo", arguments: { action: "add", text: "alice's task" } }] },
    { content: "added" },
    { toolCalls: [{ name: "todo", arguments: { action: "list" } }] },
    ({ messages }) => ({ content: JSON.stringify(lastToolResult(messages).data) }),
  ]);
  const alice = await runTurn({ sessionId: "shared", userId: "alice", message: "add it" }, h.agent, h.run);
  const bob = await runTurn({ sessionId: "shared", userId: "bob", message: "list mine" }, h.agent, h.run);
  assert.deepEqual([alice.turn, bob.turn], [1, 1]);
  assert.equal(bob.answer, '{"todos":[]}', "bob's todo tool sees bob's list only");
  const bobsRequest = h.llm.requests[2].messages.filter((m) => m.role === "user").map((m) => m.content);
  assert.deepEqual(bobsRequest, ["list mine"], "bob's context holds none of alice's messages");
  assert.deepEqual((await h.store.listTodos(keyOf("shared", "alice"))).map((t) => t.text), ["alice's task"]);
  assert.deepEqual(await h.store.listTodos(keyOf("shared", "bob")), []);
  assert.deepEqual(
    h.events.filter((e) => e.event === "run_end").map((e) => [e.user_id, e.session_id, e.turn]),
    [["alice", "shared", 1], ["bob", "shared", 1]],
  );
});

Deno.test("runTurn() runs several tool calls of one reply in order, each answered by its own tool message", async () => {
  using h = harness([
    {
      toolCalls: [
        { id: "a", name: "calculator", arguments: { expression: "2**10" } },
        { id: "b", name: "todo", arguments: { action: "add", text: "buy milk" } },
        { id: "c", name: "todo", arguments: { action: "list" } },
      ],
    },
    { content: "done" },
  ]);
  const result = await runTurn(input("go"), h.agent, h.run);
  assert.equal(result.outcome, "answered");
  const tools = (await h.store.messages(keyOf("s1", "u1"))).filter((m) => m.role === "tool");
  assert.deepEqual(tools.map((m) => m.toolCallId), ["a", "b", "c"]);
  assert.equal(JSON.parse(tools[0].content!).data.result, 1024);
  const listed = JSON.parse(tools[2].content!).data.todos;
  assert.deepEqual(listed.map((t: { text: string }) => t.text), ["buy milk"]);
  assert.deepEqual(h.events.filter((e) => e.event === "tool_call").map((e) => e.data.id), ["a", "b", "c"]);
});

Deno.test("runTurn() feeds an unknown tool back as an error listing the available tools", async () => {
  using h = harness([
    { toolCalls: [{ name: "weather", arguments: { city: "Paris" } }] },
    ({ messages }) => ({ content: String(lastToolResult(messages).error) }),
  ]);
  const result = await runTurn(input("weather?"), h.agent, h.run);
  assert.equal(result.outcome, "answered");
  assert.match(result.answer, /Unknown tool "weather"; available tools: calculator, search_mock, todo/);
  assert.deepEqual(result.toolCalls, [{ name: "weather", arguments: '{"city":"Paris"}', ok: false }]);
});

Deno.test("runTurn() reports invalid arguments with their path, then accepts the corrected call", async () => {
  using h = harness([
    { toolCalls: [{ name: "calculator", arguments: { expression: 42 } }] },
    { toolCalls: [{ name: "calculator", arguments: "{not json" }] },
    { toolCalls: [{ name: "calculator", arguments: { expression: "6*7" } }] },
    ({ messages }) => ({ content: `= ${(lastToolResult(messages).data as { result: number }).result}` }),
  ]);
  const result = await runTurn(input("6 times 7"), h.agent, h.run);
  assert.equal(result.outcome, "answered");
  assert.equal(result.answer, "= 42");
  assert.deepEqual(result.toolCalls.map((c) => c.ok), [false, false, true]);
  const errors = (await h.store.messages(keyOf("s1", "u1"))).filter((m) => m.role === "tool").map((m) =>
    JSON.parse(m.content!).error
  );
  assert.match(errors[0], /\$\.expression: expected string, got integer/);
  assert.match(errors[1], /arguments are not valid JSON/);
  assert.equal(errors[2], null);
});

Deno.test("runTurn() nudges once after an empty reply, then closes with the fixed answer", async () => {
  using h = harness([{ content: "" }, { content: null }]);
  const result = await runTurn(input("hello"), h.agent, h.run);
  assert.equal(result.outcome, "empty");
  assert.equal(result.answer, EMPTY_ANSWER);
  assert.equal(h.llm.requests.length, 2);
  const retry = h.llm.requests[1].messages.at(-1)!;
  assert.deepEqual(retry, { role: "runtime", content: EMPTY_REPLY_NUDGE });
  assert.deepEqual((await h.store.messages(keyOf("s1", "u1"))).map((m) => m.role), [
    "user",
    "runtime",
    "assistant",
  ]);
  assert.equal((await h.store.get(keyOf("s1", "u1")))!.turnCount, 1, "the nudge is not a user turn");
});

Deno.test("runTurn() answers normally when the nudge works", async () => {
  using h = harness([{ content: "  " }, { content: "hi there" }]);
  const result = await runTurn(input("hello"), h.agent, h.run);
  assert.equal(result.outcome, "answered");
  assert.equal(result.answer, "hi there");
});

Deno.test("runTurn() stops with max_steps when the model keeps calling tools", async () => {
  const call = { toolCalls: [{ name: "calculator", arguments: { expression: "1+1" } }] };
  using h = harness([call, call, call, call], { maxSteps: 3 });
  const result = await runTurn(input("loop"), h.agent, h.run);
  assert.equal(result.outcome, "max_steps");
  assert.equal(result.answer, MAX_STEPS_ANSWER);
  assert.equal(h.llm.requests.length, 3, "the model is not asked again after the limit");
  assert.equal(h.llm.remaining, 1);
  assert.equal((await h.store.messages(keyOf("s1", "u1"))).at(-1)!.content, MAX_STEPS_ANSWER);
  assert.deepEqual(h.events.at(-1)!.data.outcome, "max_steps");
});

Deno.test("runTurn() ends with outcome error and a message naming the cause when the model fails", async () => {
  using h = harness([
    new LlmError("LLM request failed: HTTP 503 from api.example.com: overloaded", {
      kind: "http",
      status: 503,
      retries: 2,
    }),
  ]);
  const result = await runTurn(input("hi"), h.agent, h.run);
  assert.equal(result.outcome, "error");
  assert.match(result.answer, /HTTP 503 from api\.example\.com: overloaded/);
  const error = h.events.find((e) => e.event === "error")!;
  assert.deepEqual(error.data, {
    kind: "http",
    status: 503,
    retries: 2,
    message: "LLM request failed: HTTP 503 from api.example.com: overloaded",
  });
  // Consistent: the user message is kept, nothing half-written; the next turn works.
  assert.deepEqual((await h.store.messages(keyOf("s1", "u1"))).map((m) => m.role), ["user"]);
});

Deno.test("runTurn() fails the turn, not the process, when the script runs out", async () => {
  using h = harness([]);
  const result = await runTurn(input("hi"), h.agent, h.run);
  assert.equal(result.outcome, "error");
  assert.match(result.answer, /Scripted model has no reply for request 1/);
});

Deno.test("runTurn() stops with aborted before asking the model when the signal is already aborted", async () => {
  using h = harness([{ content: "never" }]);
  const controller = new AbortController();
  controller.abort();
  const result = await runTurn(input("hi"), h.agent, { ...h.run, signal: controller.signal });
  assert.equal(result.outcome, "aborted");
  assert.equal(h.llm.requests.length, 0);
  assert.deepEqual(h.events.map((e) => e.event), ["run_start", "error", "run_end"]);
  assert.equal(h.events[1].data.kind, "aborted");
});

Deno.test("runTurn() aborted during tool execution stores nothing: no call, no result, no question", async () => {
  const controller = new AbortController();
  const slow = {
    name: "slow",
    description: "aborts the turn while it runs",
    parameters: { type: "object" as const },
    handler: () => {
      controller.abort(new Error("client disconnected"));
      return { done: true };
    },
  };
  using h = harness([
    {
      toolCalls: [{ name: "slow", arguments: {} }, { name: "calculator", arguments: { expression: "1+1" } }],
    },
    { content: "never" },
  ], { extraTools: [slow] });
  const result = await runTurn(input("go"), h.agent, { ...h.run, signal: controller.signal });
  assert.equal(result.outcome, "aborted");
  const key = keyOf("s1", "u1");
  assert.deepEqual(await h.store.messages(key), [], "the cancelled turn left nothing, not even its question");
  assert.equal((await h.store.get(key))!.turnCount, 0);
  const error = h.events.find((e) => e.event === "error")!;
  assert.equal(error.data.message, "the turn was aborted: client disconnected");
  // The question, the calls (stored before they ran) and the two results.
  assert.equal(error.data.discarded_messages, 4);
  // The call after the one that stopped the turn was not started.
  const results = h.events.filter((e) => e.event === "tool_result");
  assert.deepEqual(results.map((e) => [e.data.name, e.data.error]), [["slow", null], [
    "calculator",
    NOT_STARTED_ERROR,
  ]]);
  // The next turn on the same session works, takes the cancelled turn's number and sees a consistent history.
  const next = await runTurn(
    input("again"),
    { ...h.agent, llm: new ScriptedLLM([{ content: "fine" }]) },
    h.run,
  );
  assert.equal(next.outcome, "answered");
  assert.equal(next.turn, 1);
  assert.deepEqual((await h.store.messages(key)).map((m) => m.content), ["again", "fine"]);
});

Deno.test("runTurn() keeps two sessions apart: messages, todos and turn counts", async () => {
  using h = harness([
    { toolCalls: [{ name: "todo", arguments: { action: "add", text: "window one task" } }] },
    { content: "added" },
    { toolCalls: [{ name: "todo", arguments: { action: "list" } }] },
    ({ messages }) => ({ content: JSON.stringify(lastToolResult(messages).data) }),
  ]);
  await runTurn(input("add a todo", "w1"), h.agent, h.run);
  const second = await runTurn(input("list todos", "w2"), h.agent, h.run);
  assert.equal(second.answer, '{"todos":[]}');
  assert.equal(second.turn, 1);
  assert.deepEqual((await h.store.listTodos(keyOf("w1", "u1"))).map((t) => t.text), ["window one task"]);
  assert.deepEqual(await h.store.listTodos(keyOf("w2", "u1")), []);
  // The second session's requests never contain the first one's messages.
  const seen = JSON.stringify(h.llm.requests.slice(2));
  assert.ok(!seen.includes("add a todo") && !seen.includes("window one task"));
  assert.equal((await h.store.get(keyOf("w1", "u1")))!.turnCount, 1);
});

Deno.test("runTurn() counts turns across runs and a reopened database", async () => {
  using dir = tempDir();
  const path = `${dir.path}/s.db`;
  const first = new SqliteStore(path, { now: steppingClock() });
  using h1 = harness([{ content: "one" }, { content: "two" }], { store: first });
  assert.equal((await runTurn(input("a"), h1.agent, h1.run)).turn, 1);
  assert.equal((await runTurn(input("b"), h1.agent, h1.run)).turn, 2);
  await first.close();
  const reopened = new SqliteStore(path);
  using h2 = harness([{ content: "three" }], { store: reopened });
  const third = await runTurn(input("c"), h2.agent, h2.run);
  assert.equal(third.turn, 3);
  assert.deepEqual(
    h2.llm.requests[0].messages.filter((m) => m.role !== "system").map((m) => m.content),
    ["a", "one", "b", "two", "c"],
  );
  await reopened.close();
});

Deno.test("runTurn() rejects an empty message and a malformed session id before doing anything", async () => {
  using h = harness([{ content: "x" }]);
  await assert.rejects(runTurn(input("   "), h.agent, h.run), TypeError);
  await assert.rejects(runTurn(input("hi", "bad id!"), h.agent, h.run), /Invalid session id "bad id!"/);
  assert.equal(h.llm.requests.length, 0);
});

Deno.test("runTurn() passes streamed text to onDelta with its step, and never into the trace", async () => {
  using h = harness([
    { toolCalls: [{ name: "calculator", arguments: { expression: "2+2" } }] },
    { content: "It is 4.", deltas: ["It ", "is ", "4."] },
  ]);
  const deltas: [string, number][] = [];
  const result = await runTurn(input("2+2?"), h.agent, {
    ...h.run,
    onDelta: (text, step) => deltas.push([text, step]),
  });
  assert.equal(result.answer, "It is 4.");
  assert.deepEqual(deltas, [["It ", 1], ["is ", 1], ["4.", 1]]);
  assert.ok(!h.events.some((e) => JSON.stringify(e).includes('"It "')));
});

Deno.test("runTurn() gives repeated or empty tool call ids distinct ones, so each result has one call", async () => {
  using h = harness([
    {
      toolCalls: [
        { id: "dup", name: "calculator", arguments: { expression: "1+1" } },
        { id: "dup", name: "calculator", arguments: { expression: "2+2" } },
        { id: "", name: "calculator", arguments: { expression: "3+3" } },
      ],
    },
    { content: "done" },
  ]);
  await runTurn(input("go"), h.agent, h.run);
  const [, assistant, ...rest] = await h.store.messages(keyOf("s1", "u1"));
  const ids = assistant.toolCalls!.map((c) => c.id);
  assert.equal(ids[0], "dup");
  assert.equal(new Set(ids).size, 3);
  assert.ok(ids.every((id) => id !== ""));
  assert.deepEqual(rest.filter((m) => m.role === "tool").map((m) => m.toolCallId), ids);
});

Deno.test("runTurn() never freezes the objects the model client returned", async () => {
  using h = harness([]);
  const call = { id: "call_1", name: "calculator", arguments: '{"expression":"6*7"}' };
  const replies = [
    { content: null, toolCalls: [call], usage: null, model: "m" },
    { content: "42", toolCalls: [], usage: null, model: "m" },
  ];
  let i = 0;
  const agent = { ...h.agent, llm: { chat: () => Promise.resolve(replies[i++]) } };
  const result = await runTurn(input("what is 6*7?"), agent, h.run);
  assert.equal(result.answer, "42");
  assert.equal(Object.isFrozen(call), false);
  assert.equal(Object.isFrozen(replies[0].toolCalls), false);
  // The stored copy is frozen and equal.
  const stored = (await h.store.messages(keyOf("s1", "u1")))[1];
  assert.ok(Object.isFrozen(stored.toolCalls![0]));
  assert.deepEqual(stored.toolCalls, [call]);
});
