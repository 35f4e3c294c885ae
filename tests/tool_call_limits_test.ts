/**
 * No reply's tool calls can exhaust the turn: at most `maxToolCallsPerStep` run, arguments over 64 KiB are
 * refused and stored cut, and a malformed call is answered with a tool error while the others run. Every
 * call keeps exactly one result, and the stored history stays a valid request for the next step.
 */
import assert from "node:assert/strict";
import { loadConfig, MAX_TOOL_RESULT_CHARS } from "../src/config.ts";
import { createLlmFromConfig } from "../src/llm/client.ts";
import { runTurn } from "../src/agent/loop.ts";
import { SqliteStore } from "../src/store/sqlite.ts";
import { MAX_TOOL_ARGUMENT_BYTES } from "../src/agent/tool_calls.ts";
import { INVALID_TOOL_CALL_NAME } from "../src/llm/wire.ts";
import type { StoredMessage } from "../src/types.ts";
import type { ToolSpec } from "../src/tools/registry.ts";
import { harness, keyOf, tempDir } from "./_harness.ts";
import { type Behaviour, completion, json, startFaultProvider, stream } from "./fixtures/fault_provider.ts";

const input = (message: string) => ({ sessionId: "s1", userId: "u1", message });

function toolResults(messages: StoredMessage[]): { id: string; ok: boolean; error: string | null }[] {
  return messages.filter((m) => m.role === "tool").map((m) => {
    const result = JSON.parse(m.content!);
    return { id: m.toolCallId!, ok: result.ok, error: result.error };
  });
}

/** Each assistant call is answered by exactly one tool message right after it, in order. */
function assertPaired(messages: StoredMessage[]): void {
  messages.forEach((m, i) => {
    if (m.role !== "assistant" || !m.toolCalls?.length) return;
    const ids = messages.slice(i + 1, i + 1 + m.toolCalls.length).map((r) =>
      r.role === "tool" && r.toolCallId
    );
    assert.deepEqual(ids, m.toolCalls.map((call) => call.id), `results of message ${i}`);
  });
}

Deno.test("runTurn() runs the first 16 tool calls of a reply and answers the rest with a limit error", async () => {
  const many = Array.from({ length: 20 }, (_, i) => ({
    id: `c${i}`,
    name: "calculator",
    arguments: { expression: `${i}+1` },
  }));
  using h = harness([{ toolCalls: many }, { content: "done" }]);
  const result = await runTurn(input("add them all"), h.agent, h.run);
  assert.equal(result.outcome, "answered");
  const stored = await h.store.messages(keyOf("s1", "u1"));
  assertPaired(stored);
  assert.equal(stored[1].toolCalls!.length, 20);
  const results = toolResults(stored);
  assert.deepEqual(results.map((r) => r.id), many.map((call) => call.id));
  assert.deepEqual(results.map((r) => r.ok), [...Array(16).fill(true), ...Array(4).fill(false)]);
  const first = JSON.parse(stored.find((m) => m.toolCallId === "c0")!.content!);
  assert.equal(first.data.result, 1);
  for (const [i, r] of results.slice(16).entries()) {
    assert.equal(
      r.error,
      `Cannot run tool "calculator": this reply made 20 tool calls and at most 16 run per reply, so call ` +
        `${17 + i} was not run; call it again in a later step if it is still needed`,
    );
  }
  assert.deepEqual(result.toolCalls.map((call) => call.ok), results.map((r) => r.ok));
  const traced = h.events.filter((e) => e.event === "tool_result").map((e) => e.data.ok);
  assert.deepEqual(traced, results.map((r) => r.ok));
  // The model sees every result on the next step.
  assert.equal(h.llm.requests[1].messages.filter((m) => m.role === "tool").length, 20);
});

Deno.test("runTurn() runs only maxToolCallsPerStep calls when it is set, and rejects a limit below 1", async () => {
  const calls = ["1+1", "2+2", "3+3"].map((expression) => ({
    name: "calculator",
    arguments: { expression },
  }));
  using h = harness([{ toolCalls: calls }, { content: "done" }]);
  const result = await runTurn(input("go"), { ...h.agent, maxToolCallsPerStep: 2 }, h.run);
  assert.deepEqual(result.toolCalls.map((call) => call.ok), [true, true, false]);
  assert.match(
    toolResults(await h.store.messages(keyOf("s1", "u1")))[2].error!,
    /made 3 tool calls and at most 2 run per reply/,
  );
  await assert.rejects(
    () => runTurn(input("again"), { ...h.agent, maxToolCallsPerStep: 0 }, h.run),
    RangeError,
  );
});

Deno.test("runTurn() refuses tool arguments over 64 KiB and stores them cut to a marked JSON text", async () => {
  const huge = JSON.stringify({ expression: `1${"+1".repeat(40_000)}` });
  const bytes = new TextEncoder().encode(huge).byteLength;
  assert.ok(bytes > MAX_TOOL_ARGUMENT_BYTES);
  using h = harness([
    {
      toolCalls: [{ id: "big", name: "calculator", arguments: huge }, {
        id: "ok",
        name: "calculator",
        arguments: { expression: "6*7" },
      }],
    },
    { content: "done" },
  ]);
  const result = await runTurn(input("go"), h.agent, h.run);
  assert.equal(result.outcome, "answered");
  const stored = await h.store.messages(keyOf("s1", "u1"));
  assertPaired(stored);
  const [bigCall, okCall] = stored[1].toolCalls!;
  // Marked as cut, valid JSON (so the next request stays valid), and small.
  assert.deepEqual(JSON.parse(bigCall.arguments), { cut: true, bytes, prefix: huge.slice(0, 200) });
  assert.ok(bigCall.arguments.length < 1000, `stored ${bigCall.arguments.length} characters`);
  assert.equal(okCall.arguments, '{"expression":"6*7"}');
  assert.deepEqual(toolResults(stored), [
    {
      id: "big",
      ok: false,
      error: `Cannot run tool "calculator": its arguments are ${bytes} bytes, over the limit of 65536; ` +
        "send smaller arguments",
    },
    { id: "ok", ok: true, error: null },
  ]);
  assert.equal(result.toolCalls[0].arguments, bigCall.arguments);
  const traced = h.events.find((e) => e.event === "tool_call")!;
  assert.equal(traced.data.arguments, bigCall.arguments);
  const sent = h.llm.requests[1].messages.find((m) => m.role === "assistant")!;
  assert.equal(sent.toolCalls![0].arguments, bigCall.arguments);
});

Deno.test("runTurn() answers a call with an empty name with a tool error and stores a placeholder name", async () => {
  using h = harness([
    {
      toolCalls: [{ id: "a", name: "", arguments: {} }, {
        id: "b",
        name: "calculator",
        arguments: { expression: "1+2" },
      }],
    },
    { content: "done" },
  ]);
  const result = await runTurn(input("go"), h.agent, h.run);
  assert.equal(result.outcome, "answered");
  const stored = await h.store.messages(keyOf("s1", "u1"));
  assert.deepEqual(stored[1].toolCalls!.map((call) => call.name), [INVALID_TOOL_CALL_NAME, "calculator"]);
  assert.deepEqual(toolResults(stored), [
    { id: "a", ok: false, error: "Cannot run tool call 1: it has no function name" },
    { id: "b", ok: true, error: null },
  ]);
});

/** A reply with a nameless call, a call with numeric arguments and a good one, whole or streamed. */
function malformedReply(streamed: boolean): Behaviour {
  const calls = [
    { id: "bad1", type: "function", function: { arguments: "{}" } },
    { id: "bad2", type: "function", function: { name: "calculator", arguments: 12 } },
    { type: "function", function: { name: "calculator", arguments: '{"expression":"2*21"}' } },
  ];
  if (!streamed) return json(completion({ content: null, tool_calls: calls }, "tool_calls"));
  const base = { id: "chatcmpl-x", object: "chat.completion.chunk", model: "fault-model" };
  return stream([
    ...calls.map((call, index) => ({
      ...base,
      choices: [{ index: 0, delta: { tool_calls: [{ index, ...call }] } }],
    })),
    { ...base, choices: [{ index: 0, delta: {}, finish_reason: "tool_calls" }] },
  ]);
}

Deno.test("runTurn() through the real client answers malformed tool calls with tool errors and runs the others", async () => {
  for (const streamed of [false, true]) {
    using dir = tempDir();
    const provider = startFaultProvider([malformedReply(streamed)]);
    const config = loadConfig({ OPENAI_BASE_URL: provider.url, OPENAI_API_KEY: "sk-test" });
    const store = new SqliteStore(`${dir.path}/sessions.db`);
    using h = harness([], { store });
    try {
      const agent = { ...h.agent, llm: createLlmFromConfig(config, { stream: streamed }) };
      const result = await runTurn(input("what is 2*21?"), agent, h.run);
      // The provider's rule answer after tool results; it answers 400 to a history it would reject.
      assert.equal(result.outcome, "answered", `stream ${streamed}: ${result.answer}`);
      assert.equal(result.answer, "I ran 3 tools; 2 failed.");
      const stored = await store.messages(keyOf("s1", "u1"));
      assertPaired(stored);
      const calls = stored[1].toolCalls!;
      assert.deepEqual(calls.map((call) => [call.name, call.arguments]), [
        [INVALID_TOOL_CALL_NAME, "{}"],
        ["calculator", "{}"],
        ["calculator", '{"expression":"2*21"}'],
      ]);
      assert.ok(calls.every((call) => call.id !== "" && !("problem" in call)));
      assert.deepEqual(toolResults(stored).map((r) => [r.ok, r.error]), [
        [false, "Cannot run tool call 1: it has no function name"],
        [false, 'Cannot run tool "calculator": its arguments must be a JSON string or object, got number'],
        [true, null],
      ]);
      assert.equal(provider.requests.length, 2);
    } finally {
      await store.close();
      await provider.close();
    }
  }
});

Deno.test("runTurn() sends back every tool error within the result limit: a 100,000-character unknown name, long broken arguments, a throwing tool", async () => {
  const long = "x".repeat(100_000);
  const shout: ToolSpec = {
    name: "shout",
    description: "fails loudly",
    parameters: { type: "object", properties: {} },
    handler: () => {
      throw new Error("y".repeat(100_000));
    },
  };
  using h = harness([
    {
      toolCalls: [
        { id: "a", name: long, arguments: {} },
        { id: "b", name: "calculator", arguments: `{"expression": "${long.slice(0, 60_000)}` },
        { id: "c", name: "shout", arguments: {} },
      ],
    },
    { content: "done" },
  ], { extraTools: [shout] });
  const result = await runTurn(input("go"), h.agent, h.run);
  assert.equal(result.outcome, "answered");
  // What the model read back: one tool message per call, none over the limit, each saying what went wrong.
  const sent = h.llm.requests[1].messages.filter((m) => m.role === "tool");
  assert.deepEqual(sent.map((m) => m.toolCallId), ["a", "b", "c"]);
  for (const message of sent) {
    assert.ok(
      message.content!.length <= MAX_TOOL_RESULT_CHARS,
      `${message.toolCallId}: ${message.content!.length}`,
    );
  }
  const [a, b, c] = sent.map((m) => JSON.parse(m.content!));
  assert.equal(a.ok, false);
  assert.match(a.error, /^Unknown tool "x{64}…" \(100000 characters\); available tools: calculator, /);
  assert.equal(a.truncated, false, "the quoted name alone keeps the message within the limit");
  assert.match(b.error, /^Cannot run tool "calculator": arguments are not valid JSON/);
  assert.equal(c.ok, false);
  assert.equal(c.truncated, true);
  assert.match(c.error, /^Tool "shout" failed: y+…$/);
  assert.deepEqual(toolResults(await h.store.messages(keyOf("s1", "u1"))).map((r) => r.error), [
    a.error,
    b.error,
    c.error,
  ]);
});
