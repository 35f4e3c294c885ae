/** A reply cut off before its tool calls were complete: its calls are refused, never run, and traced. */
import assert from "node:assert/strict";
import { CUT_OFF_ERROR, runTurn } from "../src/agent/loop.ts";
import { parseApprovalPolicy } from "../src/approval/policy.ts";
import { SqliteStore } from "../src/store/sqlite.ts";
import type { ToolSpec } from "../src/tools/registry.ts";
import { HttpLLM } from "../src/llm/client.ts";
import { harness, keyOf, steppingClock, tempDir } from "./_harness.ts";
import { stubFetch } from "./_openai_stubs.ts";

const input = { sessionId: "s1", userId: "u1", message: "write the report" };

/** A tool that records every call it gets, so a test can tell it never ran. */
function recordingTool(name = "write_file"): { spec: ToolSpec; ran: unknown[] } {
  const ran: unknown[] = [];
  const spec: ToolSpec = {
    name,
    description: "records its calls",
    parameters: { type: "object" },
    handler: (args) => {
      ran.push(args);
      return { written: true };
    },
  };
  return { spec, ran };
}

/** The harness on a temp database file, with the recording tool beside the built-ins. */
function cutOffHarness(script: Parameters<typeof harness>[0], tool = recordingTool()) {
  const dir = tempDir();
  const store = new SqliteStore(`${dir.path}/agent.db`, { now: steppingClock() });
  const h = harness(script, { store, extraTools: [tool.spec] });
  return {
    ...h,
    ran: tool.ran,
    async [Symbol.asyncDispose]() {
      await store.close();
      dir[Symbol.dispose]();
    },
  };
}

const CUT_CALLS = [
  { id: "a", name: "write_file", arguments: '{"path":"report.md","text":"# Rep' },
  { id: "b", name: "write_file", arguments: '{"path":"notes.md"' },
];

Deno.test("runTurn() does not run the tool calls of a reply cut off at the length limit, answers each and asks again", async () => {
  await using h = cutOffHarness([
    { content: "Writing.", toolCalls: CUT_CALLS, finishReason: "length" },
    { content: "Done in two parts.", finishReason: "stop" },
  ]);
  const result = await runTurn(input, h.agent, h.run);
  assert.equal(result.outcome, "answered");
  assert.equal(result.answer, "Done in two parts.");
  assert.deepEqual(h.ran, [], "the tool never ran");

  const stored = await h.store.messages(keyOf("s1", "u1"));
  assert.deepEqual(stored.map((m) => m.role), ["user", "assistant", "tool", "tool", "assistant"]);
  assert.equal(stored[1].content, "Writing.");
  assert.deepEqual(stored[1].toolCalls, CUT_CALLS, "the calls are stored as the model sent them");
  for (const [i, id] of ["a", "b"].entries()) {
    const message = stored[2 + i];
    assert.equal(message.toolCallId, id);
    assert.deepEqual(JSON.parse(message.content!), {
      ok: false,
      data: null,
      error: CUT_OFF_ERROR,
      truncated: false,
    });
  }

  const cut = h.events.filter((e) => e.event === "reply_cut_off");
  assert.deepEqual(cut.map((e) => [e.step, e.data]), [[0, { finish_reason: "length", tool_call_count: 2 }]]);
  assert.ok(!JSON.stringify(cut).includes("report.md"), "no arguments in the event");
  assert.ok(!JSON.stringify(cut).includes("Writing."), "no content in the event");
  assert.deepEqual(h.events.map((e) => e.event), [
    "run_start",
    "llm_call",
    "reply_cut_off",
    "tool_call",
    "tool_result",
    "tool_call",
    "tool_result",
    "llm_call",
    "answer",
    "run_end",
  ]);

  // The second request carries the calls and their refusals.
  const second = h.llm.requests[1].messages.filter((m) => m.role !== "system");
  assert.deepEqual(second.map((m) => m.role), ["user", "assistant", "tool", "tool"]);
  assert.deepEqual(second.slice(2).map((m) => [m.toolCallId, JSON.parse(m.content!).error]), [
    ["a", CUT_OFF_ERROR],
    ["b", CUT_OFF_ERROR],
  ]);
  assert.deepEqual(result.toolCalls.map((c) => c.ok), [false, false]);
});

Deno.test("runTurn() treats a reply with tool calls and finishReason null (a cut stream) as cut off", async () => {
  await using h = cutOffHarness([
    { toolCalls: [CUT_CALLS[0]], finishReason: null },
    { toolCalls: [{ id: "c", name: "write_file", arguments: { path: "r.md" } }], finishReason: "tool_calls" },
    { content: "Written.", finishReason: "stop" },
  ]);
  const result = await runTurn(input, h.agent, h.run);
  assert.equal(result.outcome, "answered");
  assert.deepEqual(h.ran, [{ path: "r.md" }], "only the complete call ran");
  const cut = h.events.filter((e) => e.event === "reply_cut_off");
  assert.deepEqual(cut.map((e) => e.data), [{ finish_reason: null, tool_call_count: 1 }]);
  const results = h.events.filter((e) => e.event === "tool_result").map((e) => [e.data.id, e.data.error]);
  assert.deepEqual(results, [["a", CUT_OFF_ERROR], ["c", null]]);
});

Deno.test("runTurn() ends with error when the reply is cut off again, keeping the question and the first refusal", async () => {
  await using h = cutOffHarness([
    { toolCalls: CUT_CALLS, finishReason: "length" },
    { toolCalls: [{ id: "c", name: "write_file", arguments: '{"path":' }], finishReason: "length" },
    { content: "never asked" },
  ]);
  const result = await runTurn(input, h.agent, h.run);
  assert.equal(result.outcome, "error");
  assert.equal(h.llm.remaining, 1, "the model is not asked a third time");
  assert.deepEqual(h.ran, []);
  const message = `the model's reply was cut off twice (finish_reason "length") before its tool calls were ` +
    "complete; raise the model's output limit or ask for less at once";
  assert.equal(result.failure?.kind, "invalid_response");
  assert.equal(result.failure?.message, message);
  assert.match(result.answer, /cut off twice .* raise the model's output limit or ask for less at once/);
  // The loop names no surface's way to retry: each surface words its own (HTTP: its route).
  assert.match(result.answer, /Your message is saved; retry it, without sending it again\.$/);
  const error = h.events.find((e) => e.event === "error")!;
  assert.deepEqual(error.data, { kind: "invalid_response", status: null, retries: 0, message });
  assert.deepEqual(
    h.events.filter((e) => e.event === "reply_cut_off").map((e) => [e.step, e.data.tool_call_count]),
    [[0, 2], [1, 1]],
  );
  // The question stays, with the first reply's calls and their results; the second reply's call is not stored.
  const stored = await h.store.messages(keyOf("s1", "u1"));
  assert.deepEqual(stored.map((m) => m.role), ["user", "assistant", "tool", "tool"]);
  assert.ok(!stored.some((m) => m.toolCalls?.some((call) => call.id === "c")));

  // A retry answers the stored question, its history whole.
  const retried = await runTurn({ sessionId: "s1", userId: "u1", retry: true }, h.agent, h.run);
  assert.equal(retried.outcome, "answered");
  assert.deepEqual(
    h.llm.requests[2].messages.filter((m) => m.role !== "system").map((m) => m.role),
    ["user", "assistant", "tool", "tool"],
  );
});

Deno.test("runTurn() never asks for approval of a cut-off reply's calls", async () => {
  await using h = cutOffHarness([
    { toolCalls: CUT_CALLS, finishReason: "length" },
    { content: "Stopped.", finishReason: "stop" },
  ]);
  h.agent.approval = parseApprovalPolicy({ tools: { write_file: "ask" } });
  const result = await runTurn(input, h.agent, h.run);
  assert.equal(result.outcome, "answered");
  assert.ok(!h.events.some((e) => e.event === "approval_requested"));
  assert.equal(await h.store.pendingStep(keyOf("s1", "u1")), null);
  assert.deepEqual(h.ran, []);
});

Deno.test("runTurn() answers a cut-off reply without tool calls as before, and runs calls when finishReason is absent", async () => {
  await using h = cutOffHarness([
    { content: "A long answer that was cut", finishReason: "length" },
    { toolCalls: [{ id: "d", name: "write_file", arguments: { path: "x" } }] },
    { content: "ok" },
  ]);
  const first = await runTurn(input, h.agent, h.run);
  assert.equal(first.outcome, "answered");
  assert.equal(first.answer, "A long answer that was cut");
  const second = await runTurn({ ...input, message: "now write" }, h.agent, h.run);
  assert.equal(second.outcome, "answered");
  assert.deepEqual(h.ran, [{ path: "x" }]);
  assert.ok(!h.events.some((e) => e.event === "reply_cut_off"));
});

/** One `data:` event per chunk of choice 0. */
function sse(delta: Record<string, unknown>, finish: string | null = null): string {
  const chunk = {
    id: "chatcmpl-cut",
    model: "served-model",
    choices: [{ index: 0, delta, finish_reason: finish }],
  };
  return `data: ${JSON.stringify(chunk)}\n\n`;
}

function streamResponse(text: string): Promise<Response> {
  return Promise.resolve(new Response(text, { headers: { "content-type": "text/event-stream" } }));
}

Deno.test("runTurn() through HttpLLM refuses the tool calls of a stream cut mid-arguments", async () => {
  const cut = sse({ role: "assistant", content: null }) +
    sse({
      tool_calls: [{ index: 0, id: "a", type: "function", function: { name: "write_file", arguments: "" } }],
    }) +
    sse({ tool_calls: [{ index: 0, function: { arguments: '{"path":"rep' } }] });
  const answer = sse({ content: "Sorry, I will write it in parts." }) + sse({}, "stop") + "data: [DONE]\n\n";
  const { fetch, sent } = stubFetch(() => streamResponse(cut), () => streamResponse(answer));
  const tool = recordingTool();
  await using h = cutOffHarness([], tool);
  const llm = new HttpLLM({
    baseUrl: "https://api.example.com/v1",
    model: "test-model",
    stream: true,
    retries: 0,
    fetch,
  });
  const result = await runTurn(input, { ...h.agent, llm }, h.run);
  assert.equal(result.outcome, "answered");
  assert.equal(result.answer, "Sorry, I will write it in parts.");
  assert.deepEqual(tool.ran, []);
  assert.deepEqual(h.events.filter((e) => e.event === "reply_cut_off").map((e) => e.data), [
    { finish_reason: null, tool_call_count: 1 },
  ]);
  assert.equal(sent.length, 2);
  // deno-lint-ignore no-explicit-any
  const messages = sent[1].body.messages as any[];
  assert.deepEqual(messages.slice(-2), [
    {
      role: "assistant",
      content: null,
      tool_calls: [{
        id: "a",
        type: "function",
        function: { name: "write_file", arguments: '{"path":"rep' },
      }],
    },
    {
      role: "tool",
      tool_call_id: "a",
      content: JSON.stringify({ ok: false, data: null, error: CUT_OFF_ERROR, truncated: false }),
    },
  ]);
});
