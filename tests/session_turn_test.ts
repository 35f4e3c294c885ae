/**
 * The session layer every surface queues its turns through: what a turn asks is checked against the session
 * before anything runs or is written, a client's resent message is its retry, and a cancel finds the run.
 */
import assert from "node:assert/strict";
import { parseApprovalPolicy } from "../src/approval/policy.ts";
import { LlmError, SessionError } from "../src/errors.ts";
import { cancelTurn, queueTurn } from "../src/session/turn.ts";
import { httpHarness } from "./_http_harness.ts";

const KEY = { userId: "local", sessionId: "s1" };

/** A harness whose calculator waits for approval, with session s1 paused on "what is 2+3?". */
async function paused() {
  const h = httpHarness();
  h.deps.agent.approval = parseApprovalPolicy({ tools: { calculator: "ask" } });
  const run = await queueTurn(new AbortController().signal, { ...KEY, message: "what is 2+3?" }, h.deps);
  const result = await run(() => {});
  assert.equal(result.outcome, "awaiting_approval");
  return { h, result };
}

/** The reason of the `SessionError` that `work` rejects with. */
async function refusal(work: Promise<unknown>): Promise<string> {
  const error = await work.then(() => null, (error) => error);
  assert.ok(error instanceof SessionError, String(error));
  return error.reason;
}

Deno.test("queueTurn() refuses a new message, a retry or wrong decisions on a waiting turn before anything runs", async () => {
  const { h, result } = await paused();
  using _ = h;
  const signal = new AbortController().signal;
  const before = await h.store.messages(KEY);
  const calls = h.llm.calls;
  assert.equal(await refusal(queueTurn(signal, { ...KEY, message: "hello?" }, h.deps)), "approval_pending");
  assert.equal(await refusal(queueTurn(signal, { ...KEY, retry: true }, h.deps)), "approval_pending");
  const other = { ...KEY, decisions: { call_9: "approve" as const } };
  assert.equal(await refusal(queueTurn(signal, other, h.deps)), "invalid_decisions");
  assert.deepEqual(await h.store.messages(KEY), before);
  assert.equal(h.llm.calls, calls);

  // Decisions that match resume the waiting step's own run.
  const decided = { ...KEY, decisions: { [result.approval!.calls[0].id]: "approve" as const } };
  const run = await queueTurn(signal, decided, h.deps);
  assert.equal(run.runId, result.runId);
  const done = await run(() => {});
  assert.equal(done.outcome, "answered");
  assert.equal(done.runId, result.runId);
  assert.equal(await refusal(queueTurn(signal, decided, h.deps)), "no_pending_approval");
});

Deno.test("queueTurn() refuses a retry with nothing unanswered; a resent unanswered message is retried, stored once", async () => {
  using h = httpHarness();
  const signal = new AbortController().signal;
  assert.equal(await refusal(queueTurn(signal, { ...KEY, retry: true }, h.deps)), "nothing_to_retry");
  h.llm.fail = new LlmError("provider down", { kind: "http", status: 500 });
  const failed = await (await queueTurn(signal, { ...KEY, message: "hi" }, h.deps))(() => {});
  assert.equal(failed.outcome, "error");
  h.llm.fail = null;
  const resent = await queueTurn(signal, { ...KEY, message: "hi" }, h.deps, { retryIfResent: true });
  const answered = await resent(() => {});
  assert.equal(answered.outcome, "answered");
  assert.equal(answered.turn, failed.turn);
  const questions = (await h.store.messages(KEY)).filter((m) => m.role === "user");
  assert.deepEqual(questions.map((m) => m.content), ["hi"]);
  // Without the option the same message is a new question.
  await (await queueTurn(signal, { ...KEY, message: "hi" }, h.deps))(() => {});
  assert.equal((await h.store.messages(KEY)).filter((m) => m.role === "user").length, 2);
});

Deno.test("cancelTurn() stops the run of this process by its id, and finds none when nothing runs", async () => {
  using h = httpHarness();
  h.llm.hold = true;
  const session = await h.store.getOrCreate(KEY);
  const deps = { sessions: h.deps.sessions, trace: h.trace };
  assert.equal(await cancelTurn(session, undefined, deps), null);
  const run = await queueTurn(new AbortController().signal, { ...KEY, message: "hello" }, h.deps);
  let started!: () => void;
  const running = new Promise<void>((resolve) => (started = resolve));
  const done = run((event) => event.event === "run_start" && started());
  await running;
  assert.equal(await cancelTurn(session, "another-run", deps), null);
  assert.equal(await cancelTurn(session, undefined, deps), run.runId);
  const result = await done;
  assert.equal(result.outcome, "aborted");
  assert.equal(await cancelTurn(session, undefined, deps), null);
});
