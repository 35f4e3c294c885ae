/** `POST /v1/sessions/{id}/approvals`: a paused turn resumed over HTTP, as JSON and as SSE. */
import assert from "node:assert/strict";
import { parseApprovalPolicy } from "../src/approval/policy.ts";
import { httpHarness, parseSse, postMessage } from "./_http_harness.ts";

function decide(session: string, body: unknown, headers: Record<string, string> = {}): Request {
  return new Request(`http://agent.test/v1/sessions/${session}/approvals`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
}

function askCalculator() {
  const h = httpHarness();
  h.deps.agent.approval = parseApprovalPolicy({ tools: { calculator: "ask" } });
  return h;
}

Deno.test("POST /messages pauses on an ask tool; GET shows it; approving resumes the same run to its answer", async () => {
  using h = askCalculator();
  const paused = await h.handler(postMessage("s1", { message: "what is 2+3?" }));
  assert.equal(paused.status, 200);
  const first = await paused.json();
  assert.equal(first.outcome, "awaiting_approval");
  assert.deepEqual(first.approval.calls, [{
    id: "call_1",
    name: "calculator",
    arguments: '{"expression":"2+3"}',
  }]);

  const shown = await (await h.handler(new Request("http://agent.test/v1/sessions/s1"))).json();
  assert.equal(shown.pending_approval.run_id, first.run_id);
  assert.deepEqual(shown.pending_approval.calls, first.approval.calls);
  assert.deepEqual(shown.messages.map((m: { role: string }) => m.role), ["user"]);

  const busy = await h.handler(postMessage("s1", { message: "hello?" }));
  assert.equal(busy.status, 409);
  assert.equal((await busy.json()).error.code, "approval_pending");
  const retry = await h.handler(new Request("http://agent.test/v1/sessions/s1/retry", { method: "POST" }));
  assert.equal(retry.status, 409);
  assert.match((await retry.json()).error.message, /waiting for approval/);

  const resumed = await h.handler(decide("s1", { decisions: { call_1: "approve" } }));
  assert.equal(resumed.status, 200);
  const done = await resumed.json();
  assert.equal(done.outcome, "answered");
  assert.equal(done.answer, "The answer is 5.");
  assert.equal(done.run_id, first.run_id);
  assert.equal(done.turn, first.turn);
  const after = await (await h.handler(new Request("http://agent.test/v1/sessions/s1"))).json();
  assert.equal(after.pending_approval, null);
  assert.deepEqual(after.messages.map((m: { role: string }) => m.role), [
    "user",
    "assistant",
    "tool",
    "assistant",
  ]);

  const again = await h.handler(decide("s1", { decisions: { call_1: "approve" } }));
  assert.equal(again.status, 409);
  assert.equal((await again.json()).error.code, "no_pending_approval");
});

Deno.test("POST /approvals streams the resumed run as SSE; a denied call's result says so", async () => {
  using h = askCalculator();
  await (await h.handler(postMessage("s1", { message: "what is 2+3?" }))).body?.cancel();
  const response = await h.handler(
    decide("s1", { decisions: { call_1: "deny" } }, { accept: "text/event-stream" }),
  );
  assert.equal(response.status, 200);
  const frames = parseSse(await response.text());
  const names = frames.map((f) => f.event).filter((name) => name !== "delta");
  assert.deepEqual(names, ["approval_decided", "tool_call", "tool_result", "llm_call", "answer", "run_end"]);
  assert.equal(
    (frames.find((f) => f.event === "tool_result")!.data.data as { error: string }).error,
    "denied by the user",
  );
  const messages = await h.store.messages({ userId: "local", sessionId: "s1" });
  assert.deepEqual(messages.map((m) => m.role), ["user", "assistant", "tool", "assistant"]);
  assert.match(messages[2].content!, /denied by the user/);
});

Deno.test("POST /approvals rejects decisions that do not match the waiting calls, changing nothing", async () => {
  using h = askCalculator();
  await (await h.handler(postMessage("s1", { message: "what is 2+3?" }))).body?.cancel();
  for (
    const [body, pattern] of [
      [{}, /"decisions"/],
      [{ decisions: {} }, /no decision on call call_1/],
      [{ decisions: { call_1: "maybe" } }, /must be "approve" or "deny"/],
      [{ decisions: { call_1: "approve", other: "deny" } }, /call "other" does not wait/],
    ] as const
  ) {
    const response = await h.handler(decide("s1", body));
    assert.equal(response.status, 400, JSON.stringify(body));
    assert.match((await response.json()).error.message, pattern);
  }
  const shown = await (await h.handler(new Request("http://agent.test/v1/sessions/s1"))).json();
  assert.notEqual(shown.pending_approval, null);
  const none = await h.handler(decide("nope", { decisions: {} }));
  assert.equal(none.status, 404);
});
