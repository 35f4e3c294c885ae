/** Durable approval: the policy, the pause, the stored pending step and the resumed run. */
import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import { runTurn } from "../src/agent/loop.ts";
import { decide, parseApprovalPolicy } from "../src/approval/policy.ts";
import { SessionError } from "../src/errors.ts";
import { SCHEMA_VERSION, SqliteStore } from "../src/store/sqlite.ts";
import { checkCrashInvariants } from "../scripts/_crash_invariants.ts";
import { harness, keyOf, tempDir } from "./_harness.ts";

const ASK_TODO = parseApprovalPolicy({ tools: { todo: "ask" } });
const addTodo = (text: string, id?: string) => ({
  name: "todo",
  arguments: { action: "add", text },
  ...(id === undefined ? {} : { id }),
});

Deno.test("parseApprovalPolicy() reads modes and names the entry at fault in one line", () => {
  const policy = parseApprovalPolicy({ default: "ask", tools: { "fs__*": "deny", fs__read_file: "auto" } });
  assert.equal(decide(policy, "fs__read_file"), "auto", "an exact name beats its server's pattern");
  assert.equal(decide(policy, "fs__write_file"), "deny", "the pattern beats the default");
  assert.equal(decide(policy, "git__log"), "ask", "the default applies to server tools");
  assert.equal(decide(policy, "calculator"), "auto", "built-ins default to auto");
  assert.equal(decide(parseApprovalPolicy({ tools: { todo: "deny" } }), "todo"), "deny");
  assert.equal(decide(policy, "constructor"), "auto", "no inherited entries");
  assert.equal(decide(parseApprovalPolicy(undefined), "x__y"), "auto");
  assert.throws(
    () => parseApprovalPolicy({ tools: { x: "sometimes" } }),
    {
      name: "SyntaxError",
      message: 'mcp.json: approval.tools["x"]: expected "ask", "deny" or "auto", got "sometimes"',
    },
  );
  assert.throws(() => parseApprovalPolicy({ default: 3 }), /approval\.default: expected .* got number/);
  assert.throws(() => parseApprovalPolicy([]), /approval: expected an object/);
  assert.throws(() => parseApprovalPolicy({ tool: {} }), /unknown key "tool"/);
  assert.throws(() => parseApprovalPolicy({ tools: { "a*": "ask" } }), /"<server>__\*" pattern/);
});

Deno.test("runTurn() pauses on an ask tool without running any call of the reply, stored apart", async () => {
  using h = harness([{
    toolCalls: [{ name: "calculator", arguments: { expression: "1+1" } }, addTodo("milk", "t1")],
  }]);
  h.agent.approval = ASK_TODO;
  const result = await runTurn({ ...keyOf("s"), message: "add milk" }, h.agent, h.run);
  assert.equal(result.outcome, "awaiting_approval");
  assert.equal(result.toolCalls.length, 0, "the auto calculator call waits too");
  const requested = h.events.find((e) => e.event === "approval_requested")!;
  assert.deepEqual(requested.data.calls, [{
    id: "t1",
    name: "todo",
    arguments: '{"action":"add","text":"milk"}',
  }]);
  assert.equal(h.events.at(-1)!.data.outcome, "awaiting_approval");
  assert.deepEqual(
    (await h.store.messages(keyOf("s"))).map((m) => m.role),
    ["user"],
    "no call without results",
  );
  const pending = (await h.store.pendingStep(keyOf("s")))!;
  assert.equal(pending.toolCalls.length, 2);
  assert.deepEqual(pending.asked, ["t1"]);
  assert.deepEqual(await h.store.listTodos(keyOf("s")), []);
});

Deno.test("runTurn() with decisions runs the approved calls in the same run and the model continues to an answer", async () => {
  using h = harness([
    { toolCalls: [{ name: "calculator", arguments: { expression: "1+1" } }, addTodo("milk", "t1")] },
    { content: "Added." },
  ]);
  h.agent.approval = ASK_TODO;
  const first = await runTurn({ ...keyOf("s"), message: "add milk" }, h.agent, h.run);
  const result = await runTurn({ ...keyOf("s"), decisions: { t1: "approve" } }, h.agent, h.run);
  assert.equal(result.outcome, "answered");
  assert.equal(result.answer, "Added.");
  assert.equal(result.runId, first.runId, "the same run");
  assert.equal(result.turn, first.turn);
  assert.deepEqual((await h.store.listTodos(keyOf("s"))).map((t) => t.text), ["milk"]);
  assert.deepEqual((await h.store.messages(keyOf("s"))).map((m) => m.role), [
    "user",
    "assistant",
    "tool",
    "tool",
    "assistant",
  ]);
  assert.equal(await h.store.pendingStep(keyOf("s")), null);
  const decided = h.events.find((e) => e.event === "approval_decided")!;
  assert.deepEqual(decided.data.decisions, [{ id: "t1", name: "todo", decision: "approve" }]);
  assert.equal(decided.run_id, first.runId);
  const answer = h.events.find((e) => e.event === "answer")!;
  assert.equal(answer.step, 1, "the paused step counts");
  const ids = (await h.store.messages(keyOf("s"))).map((m) => m.id);
  assert.equal(new Set(ids).size, ids.length, "message ids go on from the paused run");
});

Deno.test("runTurn() with decisions answers a denied call with 'denied by the user' and the model sees it", async () => {
  using h = harness([{ toolCalls: [addTodo("milk", "t1")] }, { content: "Understood, not added." }]);
  h.agent.approval = ASK_TODO;
  await runTurn({ ...keyOf("s"), message: "add milk" }, h.agent, h.run);
  const result = await runTurn({ ...keyOf("s"), decisions: { t1: "deny" } }, h.agent, h.run);
  assert.equal(result.outcome, "answered");
  assert.deepEqual(await h.store.listTodos(keyOf("s")), []);
  const seen = h.llm.requests[1].messages.at(-1)!;
  assert.equal(seen.role, "tool");
  assert.match(seen.content!, /denied by the user/);
});

Deno.test("a deny policy refuses the call with a tool error and does not pause", async () => {
  using h = harness([{ toolCalls: [addTodo("milk")] }, { content: "I may not." }]);
  h.agent.approval = parseApprovalPolicy({ tools: { todo: "deny" } });
  const result = await runTurn({ ...keyOf("s"), message: "add milk" }, h.agent, h.run);
  assert.equal(result.outcome, "answered");
  assert.match(h.llm.requests[1].messages.at(-1)!.content!, /approval policy denies it/);
  assert.deepEqual(await h.store.listTodos(keyOf("s")), []);
});

Deno.test("a tool the user allowed for the session needs no approval", async () => {
  using h = harness([{ toolCalls: [addTodo("milk")] }, { content: "Added." }]);
  h.agent.approval = ASK_TODO;
  const result = await runTurn({ ...keyOf("s"), message: "add" }, h.agent, {
    ...h.run,
    allowed: new Set(["todo"]),
  });
  assert.equal(result.outcome, "answered");
});

Deno.test("a resumed turn respects max steps, counting the paused step", async () => {
  using h = harness([{ toolCalls: [addTodo("milk", "t1")] }], { maxSteps: 1 });
  h.agent.approval = ASK_TODO;
  await runTurn({ ...keyOf("s"), message: "add" }, h.agent, h.run);
  const result = await runTurn({ ...keyOf("s"), decisions: { t1: "approve" } }, h.agent, h.run);
  assert.equal(result.outcome, "max_steps");
  assert.equal(h.llm.remaining, 0, "the model is not asked again");
});

Deno.test("while a turn awaits approval, a new message or a retry is refused, and bad decisions too", async () => {
  using h = harness([{ toolCalls: [addTodo("milk", "t1")] }]);
  h.agent.approval = ASK_TODO;
  await runTurn({ ...keyOf("s"), message: "add" }, h.agent, h.run);
  const pendingError = (e: unknown) => e instanceof SessionError && e.reason === "approval_pending";
  await assert.rejects(runTurn({ ...keyOf("s"), message: "again" }, h.agent, h.run), pendingError);
  await assert.rejects(runTurn({ ...keyOf("s"), retry: true }, h.agent, h.run), pendingError);
  await assert.rejects(
    runTurn({ ...keyOf("s"), decisions: {} }, h.agent, h.run),
    /no decision on call t1/,
  );
  await assert.rejects(
    runTurn({ ...keyOf("s"), decisions: { t1: "approve", zz: "deny" } }, h.agent, h.run),
    /call "zz" does not wait for approval/,
  );
  await assert.rejects(
    runTurn({ ...keyOf("other"), decisions: {} }, h.agent, h.run),
    (e: unknown) => e instanceof SessionError && e.reason === "no_pending_approval",
  );
  assert.equal((await h.store.messages(keyOf("s"))).length, 1, "nothing written by the refusals");
  assert.equal(await h.store.deleteSession(keyOf("s")), true);
  assert.equal(await h.store.pendingStep(keyOf("s")), null, "the pending step goes with its session");
});

Deno.test("SqliteStore migrates a version-2 database to the current version keeping every row", async () => {
  using dir = tempDir();
  const path = `${dir.path}/s.db`;
  using h = harness([{ content: "hi" }], { store: new SqliteStore(path) });
  await runTurn({ ...keyOf("s"), message: "hello" }, h.agent, h.run);
  await h.store.addTodo(keyOf("s"), "keep me");
  await h.store.close();
  const db = new DatabaseSync(path);
  db.exec(
    "ALTER TABLE messages DROP COLUMN provider_state; ALTER TABLE usage_daily DROP COLUMN cached_tokens; " +
      "ALTER TABLE session_usage DROP COLUMN cached_tokens; " +
      "DROP TABLE pending_steps; DROP TABLE session_leases; DROP TABLE trace_events; DROP INDEX todos_by_call; " +
      "ALTER TABLE todos DROP COLUMN call_id; ALTER TABLE sessions DROP COLUMN calibration; " +
      "DROP TABLE session_usage; DROP TABLE usage_daily; DROP TRIGGER user_memory_unindexed; " +
      "DROP TABLE user_memory_words; DROP TABLE user_memory; ALTER TABLE sessions DROP COLUMN title; " +
      "DROP TABLE idempotency_keys; DROP TABLE responses; " +
      "PRAGMA user_version = 2;",
  );
  db.close();

  const store = new SqliteStore(path);
  try {
    assert.deepEqual((await store.messages(keyOf("s"))).map((m) => m.content), ["hello", "hi"]);
    assert.deepEqual((await store.listTodos(keyOf("s"))).map((t) => t.text), ["keep me"]);
    assert.equal((await store.get(keyOf("s")))!.turnCount, 1);
    assert.equal(await store.pendingStep(keyOf("s")), null);
  } finally {
    await store.close();
  }
  const raw = new DatabaseSync(path);
  assert.equal(
    (raw.prepare("PRAGMA user_version").get() as { user_version: number }).user_version,
    SCHEMA_VERSION,
  );
  raw.close();
  assert.deepEqual(await checkCrashInvariants(path, `${dir.path}/none.jsonl`), []);
});
