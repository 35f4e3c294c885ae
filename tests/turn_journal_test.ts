/**
 * A turn's writes all go through its journal (`RunOptions.journal`), in the order the durability rules ask:
 * the question, a step's calls before any runs, each result as its call ends, the answer; a pause instead of
 * calls without results, then the resumed calls in its place; an abort takes back exactly what it appended.
 * A journal that keeps nothing runs the same turn and leaves no message in the store.
 */
import assert from "node:assert/strict";
import { runTurn } from "../src/agent/loop.ts";
import { storeJournal, type TurnJournal } from "../src/agent/journal.ts";
import { parseApprovalPolicy } from "../src/approval/policy.ts";
import type { ToolSpec } from "../src/tools/registry.ts";
import { harness, keyOf } from "./_harness.ts";

const KEY = keyOf("s1", "u1");

/** Wraps `inner`, writing down each write as `kind:roles` (and what a tool saw, through `mark`). */
function recording(
  inner: TurnJournal,
): { journal: TurnJournal; log: string[]; mark: (what: string) => void } {
  const log: string[] = [];
  const journal: TurnJournal = {
    append: (messages, options) => {
      log.push(`append:${messages.map((m) => m.role).join(",")}`);
      return inner.append(messages, options);
    },
    pause: (step, options) => {
      log.push(`pause:${step.toolCalls.map((c) => c.name).join(",")}`);
      return inner.pause(step, options);
    },
    resume: (runId, messages) => {
      log.push(`resume:${messages.map((m) => m.role).join(",")}`);
      return inner.resume(runId, messages);
    },
    discard: async (ids) => {
      const count = await inner.discard(ids);
      log.push(`discard:${count}`);
      return count;
    },
    recordUsage: (usage) => {
      log.push(`usage:${usage.length}`);
      return inner.recordUsage(usage);
    },
    compact: (summary, cutIds, turns, options) => {
      log.push(`compact:${cutIds.length}`);
      return inner.compact(summary, cutIds, turns, options);
    },
  };
  return { journal, log, mark: (what) => log.push(what) };
}

/** A tool that writes down that it ran (to `log.mark`, set once the journal exists), then does `onRun`. */
function probe(onRun: () => void = () => {}): { spec: ToolSpec; log: { mark: (what: string) => void } } {
  const log = { mark: (_what: string) => {} };
  const spec: ToolSpec = {
    name: "probe",
    description: "writes down that it ran",
    parameters: { type: "object" },
    handler: () => {
      log.mark("probe ran");
      onRun();
      return { ok: true };
    },
  };
  return { spec, log };
}

Deno.test("a tool turn writes through its journal: the question, the calls before the tool runs, the result, the answer", async () => {
  const tool = probe();
  using h = harness([
    { toolCalls: [{ name: "probe", arguments: {} }] },
    { content: "done" },
  ], { extraTools: [tool.spec] });
  const { journal, log, mark } = recording(storeJournal(h.store, KEY));
  tool.log.mark = mark;
  const result = await runTurn({ ...KEY, message: "go" }, h.agent, { ...h.run, journal });
  assert.equal(result.outcome, "answered");
  assert.deepEqual(log, ["append:user", "append:assistant", "probe ran", "append:tool", "append:assistant"]);
  assert.deepEqual((await h.store.messages(KEY)).map((m) => m.role), [
    "user",
    "assistant",
    "tool",
    "assistant",
  ]);
});

Deno.test("a turn that waits for approval writes a pause, not calls without results; its resumption writes them in its place", async () => {
  using h = harness([
    { toolCalls: [{ name: "todo", arguments: { action: "add", text: "milk" } }] },
    { content: "added" },
  ]);
  h.agent.approval = parseApprovalPolicy({ tools: { todo: "ask" } });
  const { journal, log } = recording(storeJournal(h.store, KEY));
  const first = await runTurn({ ...KEY, message: "add milk" }, h.agent, { ...h.run, journal });
  assert.equal(first.outcome, "awaiting_approval");
  assert.deepEqual(log, ["append:user", "pause:todo"]);
  const id = first.approval!.calls[0].id;
  const resumed = await runTurn({ ...KEY, decisions: { [id]: "approve" } }, h.agent, { ...h.run, journal });
  assert.equal(resumed.outcome, "answered");
  assert.deepEqual(log.slice(2), ["resume:assistant", "append:tool", "append:assistant"]);
  assert.equal(await h.store.pendingStep(KEY), null);
});

Deno.test("an aborted turn's journal takes back exactly what the turn appended", async () => {
  const controller = new AbortController();
  const tool = probe(() => controller.abort(new Error("client disconnected")));
  using h = harness([
    { toolCalls: [{ name: "probe", arguments: {} }] },
    { content: "never" },
  ], { extraTools: [tool.spec] });
  const { journal, log, mark } = recording(storeJournal(h.store, KEY));
  tool.log.mark = mark;
  const result = await runTurn({ ...KEY, message: "go" }, h.agent, {
    ...h.run,
    journal,
    signal: controller.signal,
  });
  assert.equal(result.outcome, "aborted");
  // The question, the calls and the result: three messages appended, three taken back.
  assert.deepEqual(log.filter((line) => !line.startsWith("usage")), [
    "append:user",
    "append:assistant",
    "probe ran",
    "append:tool",
    "discard:3",
  ]);
  assert.deepEqual(await h.store.messages(KEY), []);
});

Deno.test("a journal that keeps nothing runs the same turn and leaves no message of it in the store", async () => {
  using h = harness([{ toolCalls: [{ name: "calculator", arguments: { expression: "6*7" } }] }, {
    content: "42",
  }]);
  const kept: string[] = [];
  const journal: TurnJournal = {
    append: (messages) => {
      kept.push(...messages.map((m) => m.role));
      return Promise.resolve();
    },
    pause: () => Promise.resolve(),
    resume: () => Promise.resolve(true),
    discard: () => Promise.resolve(0),
    recordUsage: () => Promise.resolve(),
    compact: () => Promise.resolve(null),
  };
  const result = await runTurn({ ...KEY, message: "what is 6*7?" }, h.agent, { ...h.run, journal });
  assert.equal(result.outcome, "answered");
  assert.equal(result.answer, "42");
  assert.deepEqual(kept, ["user", "assistant", "tool", "assistant"]);
  assert.deepEqual(await h.store.messages(KEY), []);
});

Deno.test("a compaction the token budget makes due within a turn is kept through the journal, before the turn's request", async () => {
  const long = (n: number) => `turn ${n} ` + "lorem ipsum ".repeat(150);
  using h = harness(Array.from({ length: 6 }, (_, i) => ({ content: `ok ${i}` })), { maxCtxTokens: 1500 });
  const { journal, log } = recording(storeJournal(h.store, KEY));
  for (let i = 0; i < 6; i++) await runTurn({ ...KEY, message: long(i) }, h.agent, { ...h.run, journal });
  const compacts = log.filter((line) => line.startsWith("compact:"));
  assert.ok(compacts.length > 0, log.join(" "));
  // Each is kept after the turn's question and before its answer: within the turn, as its step's.
  const first = log.indexOf(compacts[0]);
  assert.deepEqual([log[first - 1], log[first + 1]], ["append:user", "append:assistant"]);
  const kept = h.events.filter((e) => e.event === "compact" && e.data.ok === true);
  assert.equal(kept.length, compacts.length);
  assert.notEqual((await h.store.get(KEY))!.summary, null, "the store journal kept the summary");
});
