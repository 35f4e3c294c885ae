/**
 * The OpenAI-compatible route and what can stop a turn: the approval policy (a request without a session
 * cannot be come back to, so a tool that asks is refused there; with `X-Session-Id` the turn waits, says how
 * to approve and marks the wait in `awaiting_approval`, and the sessions API resumes it) and a session
 * database that fails mid-turn.
 */
import assert from "node:assert/strict";
import { parseApprovalPolicy } from "../src/approval/policy.ts";
import { readTrace } from "../src/trace/trace.ts";
import { failSecondAppend, keyOf } from "./_harness.ts";
import { httpHarness, withServer } from "./_http_harness.ts";
import { ask, assertValid, client } from "./_openai_client.ts";

const ASK_CALCULATOR = parseApprovalPolicy({ tools: { calculator: "ask" } });

/** The field of a completion (or its finish chunk) that marks a turn waiting for approval. */
interface WaitingField {
  session_id: string;
  calls: { id: string; name: string; arguments: string }[];
}

Deno.test("without a session id a tool that asks for approval is refused, and the model answers without it", async () => {
  using h = httpHarness();
  h.deps.agent.approval = ASK_CALCULATOR;
  await withServer(h, async ({ url }) => {
    const completion = await client(url).chat.completions.create({
      model: "mini-agent",
      messages: ask("what is 12*7?"),
    });
    assert.equal(completion.choices[0].finish_reason, "stop");
    assert.doesNotMatch(String(completion.choices[0].message.content), /84|Waiting for your approval/);
  });
  const results = readTrace(h.tracePath).filter((e) => e.event === "tool_result");
  assert.equal(results.length, 1);
  assert.equal(results[0].data.ok, false);
  assert.match(String(results[0].data.error), /approval policy denies it/);
  assert.ok(!readTrace(h.tracePath).some((e) => e.event === "approval_requested"));
  assert.deepEqual(await h.store.listSessions("local"), [], "nothing kept, nothing waiting");
});

Deno.test("with X-Session-Id the turn waits, the answer says how to approve, and the sessions API resumes it", async () => {
  using h = httpHarness();
  h.deps.agent.approval = ASK_CALCULATOR;
  await withServer(h, async ({ url }) => {
    const completion = await client(url).chat.completions.create(
      { model: "mini-agent", messages: ask("what is 12*7?") },
      { headers: { "X-Session-Id": "kept" } },
    );
    assert.equal(completion.choices[0].finish_reason, "stop");
    assert.match(
      String(completion.choices[0].message.content),
      /^Waiting for your approval to run calculator: .*POST \/v1\/sessions\/kept\/approvals/,
    );
    // The field that marks the wait names the calls, the same as the session shows them.
    assertValid("completion", completion);
    const marked = (completion as unknown as { awaiting_approval: WaitingField }).awaiting_approval;
    const session = await (await fetch(`${url}/v1/sessions/kept`)).json();
    const [call] = session.pending_approval.calls;
    assert.equal(call.name, "calculator");
    assert.deepEqual(marked, { session_id: "kept", calls: session.pending_approval.calls });
    const resumed = await fetch(`${url}/v1/sessions/kept/approvals`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ decisions: { [call.id]: "approve" } }),
    });
    assert.equal(resumed.status, 200);
    assert.equal((await resumed.json()).answer, "The answer is 84.");
  });
  assert.equal(await h.store.pendingStep(keyOf("kept", "local")), null);
});

Deno.test("streamed, the finish chunk of a turn that waits carries awaiting_approval; an answered turn's does not", async () => {
  using h = httpHarness();
  h.deps.agent.approval = ASK_CALCULATOR;
  await withServer(h, async ({ url }) => {
    const openai = client(url);
    const finish = async (content: string) => {
      const stream = await openai.chat.completions.create(
        { model: "mini-agent", messages: ask(content), stream: true },
        { headers: { "X-Session-Id": "streamed" } },
      );
      const chunks: Record<string, unknown>[] = [];
      for await (const chunk of stream) chunks.push(chunk as unknown as Record<string, unknown>);
      for (const chunk of chunks) assertValid("chunk", chunk);
      return chunks.find((c) =>
        (c.choices as { finish_reason: string | null }[])[0]?.finish_reason !== null
      )!;
    };
    const waiting = await finish("what is 12*7?");
    const { calls } = waiting.awaiting_approval as WaitingField;
    assert.deepEqual(calls.map((c) => c.name), ["calculator"]);
    assert.deepEqual(JSON.parse(calls[0].arguments), { expression: "12*7" });
    await fetch(`${url}/v1/sessions/streamed/approvals`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ decisions: { [calls[0].id]: "deny" } }),
    }).then((r) => r.body?.cancel());
    assert.equal((await finish("hello")).awaiting_approval, undefined);
  });
});

Deno.test("a session database that fails mid-turn on the OpenAI route is a 503 store_unavailable, in OpenAI's shape", async () => {
  using h = httpHarness();
  failSecondAppend(h.deps.store);
  await withServer(h, async ({ url }) => {
    const response = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-session-id": "down" },
      body: JSON.stringify({ model: "mini-agent", messages: ask("what is 12*7?") }),
    });
    assert.equal(response.status, 503);
    assert.equal(response.headers.get("retry-after"), "5");
    const { error } = await response.json();
    assert.equal(error.type, "server_error");
    assert.equal(error.code, "store_unavailable");
    assert.match(error.message, /^The session database is unavailable: .*sqlite:test is unavailable/);
  });
});
