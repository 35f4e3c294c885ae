/**
 * Intent before effect: a reply's calls are stored before the first runs and each result as its call ends; a
 * call a stopped process left running (stored, no result) is resolved once before the next model call, run
 * again only when its tool is safe to repeat; an approved call, once started, never starts again. A stop is
 * played by a store that fails the result's write, which leaves exactly what a kill leaves.
 */
import assert from "node:assert/strict";
import { INTERRUPTED_ERROR, runTurn } from "../src/agent/loop.ts";
import { callKey } from "../src/agent/tool_calls.ts";
import { parseApprovalPolicy } from "../src/approval/policy.ts";
import type { ToolSpec } from "../src/tools/registry.ts";
import { type Harness, harness, keyOf, realTools, stopAfterEffects } from "./_harness.ts";

const KEY = keyOf("s");

/** A tool with an effect outside the turn (a count), safe to repeat or not. */
function effectTool(name: string, safeToRepeat: boolean) {
  const runs: string[] = [];
  const spec: ToolSpec = {
    name,
    description: `counts its runs (${safeToRepeat ? "safe" : "not safe"} to repeat)`,
    parameters: { type: "object" },
    safeToRepeat,
    handler: (_args, context) => {
      runs.push(context.callId ?? "");
      return { runs: runs.length };
    },
  };
  return { spec, runs };
}

/** The tool messages of the model's last request, as the model read them. */
function toolResultsSent(h: Harness): unknown[] {
  const request = h.llm.requests.at(-1)!;
  return request.messages.filter((m) => m.role === "tool").map((m) => JSON.parse(m.content!));
}

Deno.test("runTurn() stores a reply's calls before the first runs and each result as its call ends", async () => {
  const snapshots: string[][] = [];
  using h = harness([
    { toolCalls: [{ name: "look", arguments: {}, id: "c1" }, { name: "look", arguments: {}, id: "c2" }] },
    { content: "done" },
  ]);
  const look: ToolSpec = {
    name: "look",
    description: "reads the stored history while it runs",
    parameters: { type: "object" },
    handler: async () => {
      snapshots.push((await h.store.messages(KEY)).map((m) => m.role + (m.toolCallId ?? "")));
      return null;
    },
  };
  h.agent.tools = realTools(h.store, [look]);
  const result = await runTurn({ ...KEY, message: "go" }, h.agent, h.run);
  assert.equal(result.outcome, "answered");
  assert.deepEqual(snapshots, [
    ["user", "assistant"],
    ["user", "assistant", "toolc1"],
  ]);
  // No request ever carried a call without its result.
  for (const request of h.llm.requests) {
    const calls = request.messages.flatMap((m) => m.toolCalls ?? []).map((c) => c.id);
    const results = request.messages.filter((m) => m.role === "tool").map((m) => m.toolCallId);
    assert.deepEqual(results, calls);
  }
});

Deno.test("a call a stopped process left running is answered interrupted, not run again, and the retry answers", async () => {
  const effect = effectTool("send_mail", false);
  using h = harness([
    { toolCalls: [{ name: "send_mail", arguments: {}, id: "m1" }] },
    { content: "It may have been sent; I did not send it again." },
  ], { extraTools: [effect.spec] });
  const failing = stopAfterEffects(h);
  const stopped = await runTurn({ ...KEY, message: "mail bob" }, h.agent, h.run);
  assert.equal(stopped.outcome, "error");
  assert.equal(effect.runs.length, 1);
  assert.deepEqual(
    (await h.store.messages(KEY)).map((m) => m.role),
    ["user", "assistant"],
    "the call, no result",
  );

  failing.on = false;
  h.events.length = 0;
  const retried = await runTurn({ ...KEY, retry: true }, h.agent, h.run);
  assert.equal(retried.outcome, "answered");
  assert.equal(effect.runs.length, 1, "not run a second time");
  assert.deepEqual(toolResultsSent(h), [{
    ok: false,
    data: null,
    error: INTERRUPTED_ERROR,
    truncated: false,
  }]);
  const recovered = h.events.filter((e) => e.event === "tool_recovered");
  assert.deepEqual(recovered.map((e) => [e.data.id, e.data.name, e.data.decision, e.data.ok]), [
    ["m1", "send_mail", "interrupted", false],
  ]);
  assert.deepEqual(
    h.events.map((e) => e.event).slice(0, 3),
    ["run_start", "tool_recovered", "llm_call"],
    "resolved before the model call",
  );
  assert.deepEqual(retried.toolCalls, [{ name: "send_mail", arguments: "{}", ok: false }]);
});

Deno.test("a call left running whose tool is safe to repeat runs again, once, with the same call key", async () => {
  const effect = effectTool("lookup", true);
  using h = harness([
    { toolCalls: [{ name: "lookup", arguments: {}, id: "k1" }] },
    { content: "found it" },
    { content: "next" },
  ], { extraTools: [effect.spec] });
  const failing = stopAfterEffects(h);
  await runTurn({ ...KEY, message: "look it up" }, h.agent, h.run);
  failing.on = false;
  const retried = await runTurn({ ...KEY, retry: true }, h.agent, h.run);
  assert.equal(retried.outcome, "answered");
  assert.equal(retried.answer, "found it");
  assert.equal(effect.runs.length, 2);
  assert.equal(effect.runs[0], effect.runs[1], "the same key: its stored message's id and the call's");
  const stored = await h.store.messages(KEY);
  assert.equal(effect.runs[0], callKey(stored[1].id, "k1"));
  assert.deepEqual(toolResultsSent(h), [{ ok: true, data: { runs: 2 }, error: null, truncated: false }]);
  const recovered = h.events.find((e) => e.event === "tool_recovered")!;
  assert.equal(recovered.data.decision, "ran_again");
  // A new turn after that has nothing left to resolve.
  const next = await runTurn({ ...KEY, message: "and?" }, h.agent, h.run);
  assert.equal(next.outcome, "answered");
  assert.equal(effect.runs.length, 2);
  assert.equal(h.events.filter((e) => e.event === "tool_recovered").length, 1);
});

Deno.test("todo run again after a stop adds nothing: a repeated call key returns the first todo", async () => {
  using h = harness([
    { toolCalls: [{ name: "todo", arguments: { action: "add", text: "buy milk" }, id: "t1" }] },
    { content: "Added once." },
  ]);
  const failing = stopAfterEffects(h);
  await runTurn({ ...KEY, message: "add milk" }, h.agent, h.run);
  assert.deepEqual((await h.store.listTodos(KEY)).map((t) => t.text), ["buy milk"], "the effect happened");
  failing.on = false;
  const retried = await runTurn({ ...KEY, retry: true }, h.agent, h.run);
  assert.equal(retried.outcome, "answered");
  const todos = await h.store.listTodos(KEY);
  assert.deepEqual(todos.map((t) => t.text), ["buy milk"], "not added twice");
  assert.deepEqual(toolResultsSent(h), [{
    ok: true,
    data: { todo: todos[0] },
    error: null,
    truncated: false,
  }]);
  assert.equal(h.events.find((e) => e.event === "tool_recovered")!.data.decision, "ran_again");
});

Deno.test("a new message after a stop first resolves the call left running, then asks the model", async () => {
  const effect = effectTool("deploy", false);
  using h = harness([
    { toolCalls: [{ name: "deploy", arguments: {}, id: "d1" }] },
    { content: "Asked about something else." },
  ], { extraTools: [effect.spec] });
  const failing = stopAfterEffects(h);
  await runTurn({ ...KEY, message: "deploy" }, h.agent, h.run);
  failing.on = false;
  const next = await runTurn({ ...KEY, message: "something else" }, h.agent, h.run);
  assert.equal(next.outcome, "answered");
  assert.equal(effect.runs.length, 1);
  const roles = (await h.store.messages(KEY)).map((m) => m.role);
  assert.deepEqual(roles, ["user", "assistant", "tool", "user", "assistant"]);
});

Deno.test("an approved call, once started, is not started again by a second approval or a retry", async () => {
  const effect = effectTool("wire_money", false);
  using h = harness([
    { toolCalls: [{ name: "wire_money", arguments: {}, id: "w1" }] },
    { content: "The transfer may have gone out; check before sending another." },
  ], { extraTools: [effect.spec] });
  h.agent.approval = parseApprovalPolicy({ tools: { wire_money: "ask" } });
  const paused = await runTurn({ ...KEY, message: "pay alice" }, h.agent, h.run);
  assert.equal(paused.outcome, "awaiting_approval");
  const failing = stopAfterEffects(h);
  const approved = await runTurn({ ...KEY, decisions: { w1: "approve" } }, h.agent, h.run);
  assert.equal(approved.outcome, "error");
  assert.equal(effect.runs.length, 1);
  assert.equal(await h.store.pendingStep(KEY), null, "the step left pending approval once it started");
  await assert.rejects(
    () => runTurn({ ...KEY, decisions: { w1: "approve" } }, h.agent, h.run),
    /no turn waiting for approval|no pending|nothing to approve/i,
  );
  failing.on = false;
  const retried = await runTurn({ ...KEY, retry: true }, h.agent, h.run);
  assert.equal(retried.outcome, "answered");
  assert.equal(effect.runs.length, 1, "neither the approval nor the retry ran it again");
  assert.deepEqual(toolResultsSent(h), [{
    ok: false,
    data: null,
    error: INTERRUPTED_ERROR,
    truncated: false,
  }]);
});

Deno.test("an approved step aborted while it runs keeps its calls and results; the retry goes on from them", async () => {
  const controller = new AbortController();
  const runs: string[] = [];
  const stopper: ToolSpec = {
    name: "pay",
    description: "stops the turn while it runs",
    parameters: { type: "object" },
    handler: () => {
      runs.push("pay");
      controller.abort(new Error("Ctrl-C"));
      return { paid: true };
    },
  };
  using h = harness([
    { toolCalls: [{ name: "pay", arguments: {}, id: "p1" }, { name: "pay", arguments: {}, id: "p2" }] },
    { content: "Paid once; the second was not started." },
  ], { extraTools: [stopper] });
  h.agent.approval = parseApprovalPolicy({ tools: { pay: "ask" } });
  await runTurn({ ...KEY, message: "pay" }, h.agent, h.run);
  const aborted = await runTurn({ ...KEY, decisions: { p1: "approve", p2: "approve" } }, h.agent, {
    ...h.run,
    signal: controller.signal,
  });
  assert.equal(aborted.outcome, "aborted");
  assert.deepEqual(runs, ["pay"]);
  const stored = await h.store.messages(KEY);
  assert.deepEqual(
    stored.map((m) => m.role),
    ["user", "assistant", "tool", "tool"],
    "the approved step stays",
  );
  assert.equal(
    JSON.parse(stored[3].content!).error,
    "not run: the turn was stopped before this call started",
  );
  const retried = await runTurn({ ...KEY, retry: true }, h.agent, h.run);
  assert.equal(retried.outcome, "answered");
  assert.deepEqual(runs, ["pay"]);
  assert.equal(h.events.filter((e) => e.event === "tool_recovered").length, 0, "nothing was left running");
});
