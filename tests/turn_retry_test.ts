/** Retrying a turn that ended in error, and taking back a cancelled one, through `runTurn` itself. */
import { failedTurn } from "../src/http/errors.ts";
import assert from "node:assert/strict";
import { LlmError, SessionError } from "../src/errors.ts";
import { runTurn } from "../src/agent/loop.ts";
import { unansweredMessage } from "../src/agent/agent.ts";
import { ScriptedLLM } from "../src/llm/scripted.ts";
import { harness, keyOf, storedMessage } from "./_harness.ts";

const key = { sessionId: "s1", userId: "u1" };
const failure = () =>
  new LlmError("LLM request failed: HTTP 500 from provider.test", { kind: "http", status: 500 });

Deno.test("runTurn() with retry answers the question of a failed turn, keeping its number and one copy", async () => {
  using h = harness([
    { toolCalls: [{ name: "calculator", arguments: { expression: "6*7" } }] },
    failure(),
    { content: "It is 42." },
  ]);
  const failed = await runTurn({ ...key, message: "what is 6*7?" }, h.agent, h.run);
  assert.equal(failed.outcome, "error");
  assert.match(failed.answer, /Your message is saved; retry it, without sending it again\.$/);
  assert.match(failedTurn(failed).message, /retry it with POST \/v1\/sessions\/s1\/retry, without/);
  // The completed tool step stays: the retry goes on from it.
  assert.deepEqual((await h.store.messages(keyOf("s1", "u1"))).map((m) => m.role), [
    "user",
    "assistant",
    "tool",
  ]);

  const retried = await runTurn({ ...key, retry: true }, h.agent, h.run);
  assert.equal(retried.outcome, "answered");
  assert.equal(retried.turn, failed.turn);
  assert.equal(retried.answer, "It is 42.");
  assert.deepEqual((await h.store.messages(keyOf("s1", "u1"))).map((m) => m.role), [
    "user",
    "assistant",
    "tool",
    "assistant",
  ]);
  assert.equal((await h.store.messages(keyOf("s1", "u1"))).filter((m) => m.role === "user").length, 1);
  assert.equal((await h.store.get(keyOf("s1", "u1")))!.turnCount, 1);
  // The model saw the question once, then the tool step, in the retried request.
  const request = h.llm.requests.at(-1)!.messages;
  assert.deepEqual(request.filter((m) => m.role === "user").map((m) => m.content), ["what is 6*7?"]);
  const start = h.events.filter((e) => e.event === "run_start").at(-1)!;
  assert.deepEqual(start.data, { user_id: "u1", message: "what is 6*7?", retry: true });
});

Deno.test("runTurn() with retry fails with nothing_to_retry after an answered turn, changing nothing", async () => {
  using h = harness([{ content: "hi" }]);
  await runTurn({ ...key, message: "hello" }, h.agent, h.run);
  const before = await h.store.messages(keyOf("s1", "u1"));
  await assert.rejects(
    runTurn({ ...key, retry: true }, h.agent, h.run),
    (e) =>
      e instanceof SessionError && e.reason === "nothing_to_retry" &&
      /has no unanswered message/.test(e.message),
  );
  assert.deepEqual(await h.store.messages(keyOf("s1", "u1")), before);
  await assert.rejects(
    runTurn({ sessionId: "empty", userId: "u1", retry: true }, h.agent, h.run),
    (e) => e instanceof SessionError && e.reason === "nothing_to_retry",
  );
  assert.equal(await h.store.get(keyOf("empty", "u1")), null, "a retry creates no session");
});

Deno.test("runTurn() with retry that is cancelled keeps the question, so it can be retried again", async () => {
  using h = harness([failure()]);
  await runTurn({ ...key, message: "what is 6*7?" }, h.agent, h.run);
  const controller = new AbortController();
  controller.abort(new Error("Ctrl-C"));
  const cancelled = await runTurn({ ...key, retry: true }, h.agent, { ...h.run, signal: controller.signal });
  assert.equal(cancelled.outcome, "aborted");
  assert.deepEqual((await h.store.messages(keyOf("s1", "u1"))).map((m) => m.content), ["what is 6*7?"]);
  const again = await runTurn({ ...key, retry: true }, {
    ...h.agent,
    llm: new ScriptedLLM([{ content: "42" }]),
  }, h.run);
  assert.equal(again.answer, "42");
});

Deno.test("runTurn() cancelled before its answer takes back its question and turn count, and says so", async () => {
  using h = harness([{ content: "first" }, failure()]);
  await runTurn({ ...key, message: "one" }, h.agent, h.run);
  const controller = new AbortController();
  controller.abort(new Error("client disconnected"));
  const cancelled = await runTurn({ ...key, message: "two" }, h.agent, {
    ...h.run,
    signal: controller.signal,
  });
  assert.equal(cancelled.outcome, "aborted");
  assert.deepEqual((await h.store.messages(keyOf("s1", "u1"))).map((m) => m.content), ["one", "first"]);
  assert.equal((await h.store.get(keyOf("s1", "u1")))!.turnCount, 1);
  const error = h.events.findLast((e) => e.event === "error")!;
  assert.equal(error.data.kind, "aborted");
  assert.equal(error.data.discarded_messages, 1);
});

Deno.test("unansweredMessage() finds the last question no final answer follows", () => {
  const m = (id: string, role: "user" | "assistant" | "tool" | "runtime", extra = {}) =>
    storedMessage(id, role, id, extra);
  const call = { toolCalls: [{ id: "c", name: "calculator", arguments: "{}" }] };
  assert.equal(unansweredMessage([]), null);
  assert.equal(unansweredMessage([m("q", "user"), m("a", "assistant")]), null);
  assert.equal(unansweredMessage([m("q", "user")])?.id, "q");
  assert.equal(unansweredMessage([m("q", "user"), m("a", "assistant", call), m("t", "tool")])?.id, "q");
  assert.equal(
    unansweredMessage([m("q1", "user"), m("a", "assistant"), m("q2", "user"), m("n", "runtime")])?.id,
    "q2",
  );
});

Deno.test("run_end carries the turn's usage in snake_case, like llm_call and the HTTP body", async () => {
  using h = harness([{
    content: "hi",
    usage: { promptTokens: 7, completionTokens: 2, totalTokens: 9, cachedTokens: null },
  }]);
  await runTurn({ ...key, message: "hello" }, h.agent, h.run);
  const end = h.events.find((e) => e.event === "run_end")!;
  assert.deepEqual(end.data.usage, { prompt_tokens: 7, completion_tokens: 2, total_tokens: 9 });
  const call = h.events.find((e) => e.event === "llm_call")!;
  assert.equal(call.data.prompt_tokens, 7);
});
