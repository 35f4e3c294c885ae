/**
 * `POST /v1/responses` and `GET /v1/responses/{id}` through the official `openai` client against a real server
 * on 127.0.0.1: a turn as a `response` object and as its events (every one checked for its shape), chains by
 * `previous_response_id`, sessions by id, `store: false`, structured output, errors and idempotency.
 */
import assert from "node:assert/strict";
import { CLIENT_INSTRUCTIONS_HEADER, SYSTEM_PROMPT } from "../src/agent/context.ts";
import { parseApprovalPolicy } from "../src/approval/policy.ts";
import { MAX_STEPS_ANSWER } from "../src/agent/loop.ts";
import { LlmError } from "../src/errors.ts";
import type { LLM } from "../src/llm/llm.ts";
import { readTrace } from "../src/trace/trace.ts";
import type { Message } from "../src/types.ts";
import { keyOf } from "./_harness.ts";
import { type HttpHarness, httpHarness, withServer } from "./_http_harness.ts";
import { client, OpenAI, rejection } from "./_openai_client.ts";
import { z, zodTextFormat } from "./_dev_deps.ts";
import { assertResponse, assertResponseEvent } from "./_responses_shape.ts";

/** Records the messages of every model call, then lets the harness's model answer. */
function recordRequests(h: HttpHarness): Message[][] {
  const seen: Message[][] = [];
  const inner = h.deps.agent.llm;
  const recording: LLM = {
    chat: (messages, options) => (seen.push(structuredClone(messages)), inner.chat(messages, options)),
  };
  h.deps.agent.llm = recording;
  return seen;
}

/** A raw JSON POST to `/v1/responses` of the served harness. */
function post(url: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${url}/v1/responses`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
}

Deno.test("responses.create() runs one agent turn, tools on the server, and gets a completed response", async () => {
  using h = httpHarness();
  await withServer(h, async ({ url }) => {
    const response = await client(url).responses.create({ model: "mini-agent", input: "what is 12*7?" });
    assertResponse(response);
    const trace = readTrace(h.tracePath);
    const runId = trace[0].run_id;
    assert.equal(response.id, `resp_${runId}`);
    assert.equal(response.object, "response");
    assert.equal(response.status, "completed");
    assert.equal(response.model, "mini-agent");
    assert.equal(
      response.output_text,
      "The answer is 84.",
      "the client computes output_text from the output",
    );
    // The calculator ran on the server: the message, then the call as one the server made (an `mcp_call`
    // with its result), never a `function_call` the client would have to run.
    assert.deepEqual(response.output, [{
      id: `msg_${runId}`,
      type: "message",
      status: "completed",
      role: "assistant",
      content: [{ type: "output_text", text: "The answer is 84.", annotations: [], logprobs: [] }],
    }, {
      id: `mcp_${runId}_1`,
      type: "mcp_call",
      status: "completed",
      server_label: "mini-agent",
      name: "calculator",
      arguments: '{"expression":"12*7"}',
      output: '{"expression":"12*7","result":84}',
      error: null,
    }]);
    assert.deepEqual(response.usage, {
      input_tokens: 20,
      input_tokens_details: { cached_tokens: 0 },
      output_tokens: 4,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: 24,
    });
    assert.equal(
      (response as unknown as { store: boolean }).store,
      true,
      "a field the type lacks; the API sends it",
    );
    assert.equal(response.previous_response_id, null);
    assert.deepEqual(response.text, { format: { type: "text" } });
    assert.equal(response.incomplete_details, null);
    assert.deepEqual(trace.map((e) => e.event), [
      "run_start",
      "llm_call",
      "tool_call",
      "tool_result",
      "llm_call",
      "answer",
      "run_end",
    ]);
  });
});

Deno.test("an item_reference to a kept response's tool call is taken as read (the session holds it); to no call of it, a 400", async () => {
  using h = httpHarness();
  await withServer(h, async ({ url }) => {
    const first = await (await post(url, { model: "mini-agent", input: "what is 12*7?" })).json();
    const [message, call] = first.output as { id: string }[];
    const reference = (id: string) => ({ type: "item_reference", id });
    const input = [
      { role: "user", content: "what is 12*7?" },
      reference(message.id),
      reference(call.id),
      { role: "user", content: "thanks" },
    ];
    const followed = await post(url, { model: "mini-agent", input });
    assert.equal(followed.status, 200);
    assert.equal((await followed.json()).output[0].content[0].text, "echo: thanks");
    const wrong = await post(url, {
      model: "mini-agent",
      input: [reference(call.id.replace(/_1$/, "_9")), { role: "user", content: "thanks" }],
    });
    assert.equal(wrong.status, 400);
    assert.equal((await wrong.json()).error.param, "input[0].id");
  });
});

Deno.test("responses.create({stream: true}) sends the Responses events in order, the text as it streams", async () => {
  using h = httpHarness();
  h.llm.preamble = "Let me compute.";
  await withServer(h, async ({ url }) => {
    const openai = client(url);
    const stream = await openai.responses.create({
      model: "mini-agent",
      input: "what is 6*7?",
      stream: true,
    });
    const events: Record<string, unknown>[] = [];
    for await (const event of stream) events.push(event as unknown as Record<string, unknown>);
    for (const event of events) assertResponseEvent(event);
    assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i));
    const types = events.map((e) => e.type);
    const deltas = types.filter((t) => t === "response.output_text.delta").length;
    assert.ok(deltas >= 2, "the preamble and the answer's words stream as deltas");
    assert.deepEqual(types.filter((t) => t !== "response.output_text.delta"), [
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.content_part.added",
      // The calculator's call, once its result is in: an item of its own after the message.
      "response.output_item.added",
      "response.output_item.done",
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.completed",
    ]);
    const call = events.filter((e) => e.type === "response.output_item.added")[1];
    assert.equal(call.output_index, 1);
    assert.equal((call.item as { type: string; name: string }).name, "calculator");
    const text = events.filter((e) => e.type === "response.output_text.delta").map((e) => e.delta).join("");
    assert.equal(text, "Let me compute.\n\nThe answer is 42.", "text before the tool call, set apart");
    assert.equal(events.find((e) => e.type === "response.output_text.done")!.text, text);
    const created = events[0].response as Record<string, unknown>;
    assert.equal(created.status, "in_progress");
    assert.deepEqual(created.output, []);
    const completed = events.at(-1)!.response as OpenAI.Responses.Response;
    assert.equal(completed.status, "completed");
    assert.equal(completed.id, created.id);
    // The JSON answer says the same, and the kept response is the completed one.
    const kept = await openai.responses.retrieve(completed.id);
    assert.deepEqual({ ...kept, output_text: undefined }, { ...completed, output_text: undefined });
    assert.equal(kept.output_text, text);
  });
});

Deno.test("previous_response_id continues the session its response was made on", async () => {
  using h = httpHarness();
  const seen = recordRequests(h);
  await withServer(h, async ({ url }) => {
    const openai = client(url);
    const first = await openai.responses.create({ model: "mini-agent", input: "my name is Ada" });
    assert.equal(first.output_text, "echo: my name is Ada");
    const second = await openai.responses.create({
      model: "mini-agent",
      input: [{ role: "user", content: "what is my name" }],
      previous_response_id: first.id,
    });
    assert.equal(second.previous_response_id, first.id);
    assert.equal(second.output_text, "echo: what is my name");
    // The second turn's model call read the first turn from the session.
    assert.deepEqual(
      seen[1].filter((m) => m.role !== "system").map(({ role, content }) => ({ role, content })),
      [
        { role: "user", content: "my name is Ada" },
        { role: "assistant", content: "echo: my name is Ada" },
        { role: "user", content: "what is my name" },
      ],
    );
    const sessions = await h.store.listSessions("local");
    assert.equal(sessions.length, 1, "one session for the chain");
    assert.match(sessions[0].id, /^responses-/);
    assert.equal(sessions[0].turnCount, 2);
    assert.equal((await h.store.response("local", second.id))?.sessionId, sessions[0].id);
    // A third continuing the first goes on the same session (it is the session's, not a fork).
    await openai.responses.create({ model: "mini-agent", input: "third", previous_response_id: first.id });
    assert.equal((await h.store.listSessions("local"))[0].turnCount, 3);
  });
});

Deno.test("a new chain's earlier input items open its session; instructions and system items are the client's", async () => {
  using h = httpHarness();
  const seen = recordRequests(h);
  await withServer(h, async ({ url }) => {
    const response = await client(url).responses.create({
      model: "mini-agent",
      instructions: "Be brief.",
      input: [
        { role: "developer", content: "Answer in French." },
        { role: "user", content: [{ type: "input_text", text: "hi" }] },
        { type: "message", role: "assistant", content: [{ type: "output_text", text: "echo: hi" }] },
        { type: "message", role: "user", content: [{ type: "input_text", text: "again" }] },
      ],
    } as OpenAI.Responses.ResponseCreateParamsNonStreaming);
    assert.equal(response.output_text, "echo: again");
    assert.equal(response.instructions, "Be brief.");
  });
  assert.deepEqual(seen[0].map(({ role, content }) => ({ role, content })), [
    { role: "system", content: SYSTEM_PROMPT },
    { role: "system", content: `${CLIENT_INSTRUCTIONS_HEADER}\n\nBe brief.\n\nAnswer in French.` },
    { role: "user", content: "hi" },
    { role: "assistant", content: "echo: hi" },
    { role: "user", content: "again" },
  ]);
  const [session] = await h.store.listSessions("local");
  const messages = await h.store.messages(keyOf(session.id, "local"));
  assert.deepEqual(messages.map((m) => m.content), ["hi", "echo: hi", "again", "echo: again"]);
});

Deno.test("X-Session-Id (or metadata.session_id) runs the turn on that session; only the last input is new", async () => {
  using h = httpHarness();
  await withServer(h, async ({ url }) => {
    const openai = client(url);
    await openai.responses.create({ model: "mini-agent", input: "first" }, {
      headers: { "X-Session-Id": "mine" },
    });
    const response = await openai.responses.create({
      model: "mini-agent",
      input: [{ role: "user", content: "ignored history" }, { role: "user", content: "second" }],
      metadata: { session_id: "mine" },
    });
    assert.deepEqual(response.metadata, { session_id: "mine" });
    const messages = await h.store.messages(keyOf("mine", "local"));
    assert.deepEqual(messages.map((m) => m.content), ["first", "echo: first", "second", "echo: second"]);
    assert.equal((await h.store.response("local", response.id))?.sessionId, "mine");
    const other = await post(url, { model: "mini-agent", input: "x", previous_response_id: response.id }, {
      "x-session-id": "another",
    });
    assert.equal(other.status, 400);
    assert.equal((await other.json()).error.param, "previous_response_id");
  });
});

Deno.test("store: false runs on a private session kept nowhere; its id is no previous_response_id", async () => {
  using h = httpHarness();
  await withServer(h, async ({ url }) => {
    const openai = client(url);
    const response = await openai.responses.create({
      model: "mini-agent",
      input: "what is 2+3?",
      store: false,
    });
    assert.equal(response.output_text, "The answer is 5.");
    assert.equal(
      (response as unknown as { store: boolean }).store,
      false,
      "a field the type lacks; the API sends it",
    );
    assert.deepEqual(await h.store.listSessions("local"), []);
    const retrieved = await rejection(openai.responses.retrieve(response.id));
    assert.ok(retrieved instanceof OpenAI.NotFoundError);
    const continued = await rejection(
      openai.responses.create({ model: "mini-agent", input: "more", previous_response_id: response.id }),
    );
    assert.ok(continued instanceof OpenAI.NotFoundError);
    assert.equal(
      (continued as InstanceType<typeof OpenAI.NotFoundError>).code,
      "previous_response_not_found",
    );
  });
});

Deno.test("GET /v1/responses/{id} answers the user who made the response, 404 in OpenAI's shape for another", async () => {
  const alice = { token: "alice-token-0123456789", userId: "alice" };
  const bob = { token: "bob-token-0123456789ab", userId: "bob" };
  using h = httpHarness({ tokens: [alice, bob] });
  await withServer(h, async ({ url }) => {
    const made = await client(url, alice.token).responses.create({ model: "mini-agent", input: "hello" });
    const again = await client(url, alice.token).responses.retrieve(made.id);
    assert.deepEqual(again, made);
    const theirs = await fetch(`${url}/v1/responses/${made.id}`, {
      headers: { authorization: `Bearer ${bob.token}` },
    });
    assert.equal(theirs.status, 404);
    assert.deepEqual(await theirs.json(), {
      error: {
        message: `Response with id '${made.id}' not found.`,
        type: "invalid_request_error",
        param: null,
        code: "not_found",
      },
    });
    const malformed = await fetch(`${url}/v1/responses/${"x".repeat(200)}`, {
      headers: { authorization: `Bearer ${alice.token}` },
    });
    assert.equal(malformed.status, 404, "a malformed id is no response's");
    assert.equal((await malformed.json()).error.code, "not_found");
    // Deleting the session deletes its responses.
    const [session] = await h.store.listSessions("alice");
    const deleted = await fetch(`${url}/v1/sessions/${session.id}`, {
      method: "DELETE",
      headers: { authorization: `Bearer ${alice.token}` },
    });
    assert.equal(deleted.status, 204);
    assert.ok(
      await rejection(client(url, alice.token).responses.retrieve(made.id)) instanceof OpenAI.NotFoundError,
    );
  });
});

Deno.test("responses.parse() with a zod text format gets the checked JSON as output_parsed", async () => {
  using h = httpHarness();
  h.deps.agent.llm = {
    chat: () =>
      Promise.resolve({
        content: '{"city": "Lisbon", "days": 3}',
        toolCalls: [],
        usage: { promptTokens: 5, completionTokens: 5, totalTokens: 10, cachedTokens: null },
        model: "rule",
      }),
  };
  await withServer(h, async ({ url }) => {
    const trip = z.object({ city: z.string(), days: z.number() });
    const response = await client(url).responses.parse({
      model: "mini-agent",
      input: "plan a trip",
      text: { format: zodTextFormat(trip, "trip") },
    });
    assertResponse(response);
    assert.deepEqual(response.output_parsed, { city: "Lisbon", days: 3 });
    assert.equal((response.text?.format as { name?: string }).name, "trip");
  });
});

Deno.test("a turn that hits its step limit is an incomplete response, reason max_output_tokens", async () => {
  using h = httpHarness();
  h.deps.agent.maxSteps = 1;
  await withServer(h, async ({ url }) => {
    const openai = client(url);
    const response = await openai.responses.create({ model: "mini-agent", input: "what is 1+1?" });
    assertResponse(response);
    assert.equal(response.status, "incomplete");
    assert.deepEqual(response.incomplete_details, { reason: "max_output_tokens" });
    assert.equal(response.output_text, MAX_STEPS_ANSWER);
    assert.equal((response.output[0] as { status: string }).status, "incomplete");
    const stream = await openai.responses.create({
      model: "mini-agent",
      input: "what is 1+2?",
      stream: true,
    });
    const types: string[] = [];
    for await (const event of stream) types.push(event.type);
    assert.equal(types.at(-1), "response.incomplete");
  });
});

Deno.test("a model failure is OpenAI's 502 with x-should-retry false and turn_kept; streamed, error then response.failed", async () => {
  using h = httpHarness();
  h.llm.fail = new LlmError("LLM request failed: HTTP 500 from provider.test", { kind: "http", status: 500 });
  await withServer(h, async ({ url }) => {
    const plain = await post(url, { model: "mini-agent", input: "hello" });
    assert.equal(plain.status, 502);
    assert.equal(plain.headers.get("x-should-retry"), "false");
    const { error } = await plain.json();
    assert.equal(error.code, "llm_error");
    assert.equal(error.type, "server_error");
    assert.equal(error.turn_kept, true);
    const streamed = await post(url, { model: "mini-agent", input: "hello", stream: true });
    const frames = (await streamed.text()).split("\n\n").filter((f) => f !== "");
    const events = frames.map((f) => JSON.parse(f.split("\n").find((l) => l.startsWith("data: "))!.slice(6)));
    for (const event of events) assertResponseEvent(event);
    assert.deepEqual(events.slice(-2).map((e) => e.type), ["error", "response.failed"]);
    assert.equal(events.at(-2).code, "llm_error");
    assert.equal(events.at(-2).status, 502);
    assert.equal(events.at(-1).response.status, "failed");
    const thrown = await rejection((async () => {
      const stream = await client(url).responses.create({ model: "mini-agent", input: "hi", stream: true });
      for await (const _ of stream);
    })());
    assert.ok(thrown instanceof OpenAI.APIError, "the client throws at the error event");
  });
});

Deno.test("input the agent does not take is a 400 naming the parameter; another model a 404", async () => {
  using h = httpHarness();
  await withServer(h, async ({ url }) => {
    const cases: [unknown, number, string | null, RegExp][] = [
      [
        { input: [{ type: "function_call_output", call_id: "c", output: "1" }] },
        400,
        "input[0].type",
        /own tools/,
      ],
      [
        { input: [{ role: "user", content: [{ type: "input_image", image_url: "https://x.test/a.png" }] }] },
        400,
        "input[0].content[0]",
        /images are not supported yet/,
      ],
      [{ input: "hi", tools: [{ type: "function", name: "f", parameters: {} }] }, 400, "tools", /own tools/],
      [{ input: [{ role: "assistant", content: "hi" }] }, 400, "input[0]", /must be a user message/],
      [{}, 400, "input", /Missing required parameter/],
      [
        { input: [{ type: "item_reference", id: "msg_nope" }, { role: "user", content: "hi" }] },
        400,
        "input[0].id",
        /no message of a response this user kept/,
      ],
      [
        { input: "hi", text: { format: { type: "json_schema", name: "x" } } },
        400,
        "text.format.schema",
        /missing/,
      ],
      [{ input: "hi", model: "gpt-5" }, 404, "model", /does not exist/],
    ];
    for (const [body, status, param, message] of cases) {
      const response = await post(url, { model: "mini-agent", ...(body as object) });
      const { error } = await response.json();
      assert.equal(response.status, status, JSON.stringify(body));
      assert.equal(error.param, param);
      assert.match(error.message, message);
    }
  });
});

Deno.test("an Idempotency-Key makes a repeated request get the first response, the turn run once", async () => {
  using h = httpHarness();
  await withServer(h, async ({ url }) => {
    const headers = { "Idempotency-Key": "create-1" };
    const first = await post(url, { model: "mini-agent", input: "what is 3*3?" }, headers);
    const repeat = await post(url, { model: "mini-agent", input: "what is 3*3?" }, headers);
    assert.equal(repeat.headers.get("idempotent-replayed"), "true");
    assert.deepEqual(await repeat.json(), await first.json());
    assert.equal(h.llm.calls, 2, "one turn: the calculator call and the answer");
    const other = await post(url, { model: "mini-agent", input: "what is 4*4?" }, headers);
    assert.equal(other.status, 422);
    assert.equal((await other.json()).error.code, "idempotency_key_reused");
  });
});

Deno.test("a call that waits for approval marks the response awaiting_approval; the sessions API resumes it", async () => {
  using h = httpHarness();
  h.deps.agent.approval = parseApprovalPolicy({ tools: { calculator: "ask" } });
  await withServer(h, async ({ url }) => {
    const openai = client(url);
    const response = await openai.responses.create({ model: "mini-agent", input: "what is 12*7?" });
    assertResponse(response);
    assert.equal(response.status, "completed");
    assert.match(response.output_text, /^Waiting for your approval to run calculator: .*\/approvals/);
    const [session] = await h.store.listSessions("local");
    const marked = (response as unknown as { awaiting_approval: Record<string, unknown> }).awaiting_approval;
    const shown = await (await fetch(`${url}/v1/sessions/${session.id}`)).json();
    assert.deepEqual(marked, { session_id: session.id, calls: shown.pending_approval.calls });
    const kept = await openai.responses.retrieve(response.id);
    assert.deepEqual((kept as unknown as { awaiting_approval: unknown }).awaiting_approval, marked);
    const resumed = await fetch(`${url}/v1/sessions/${session.id}/approvals`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ decisions: { [shown.pending_approval.calls[0].id]: "approve" } }),
    });
    assert.equal((await resumed.json()).answer, "The answer is 84.");
    const stream = await openai.responses.create({
      model: "mini-agent",
      input: "what is 1+1?",
      previous_response_id: response.id,
      stream: true,
    });
    let last: Record<string, unknown> = {};
    for await (const event of stream) last = event as unknown as Record<string, unknown>;
    assert.equal(last.type, "response.completed");
    const waiting = (last.response as { awaiting_approval: { session_id: string } }).awaiting_approval;
    assert.equal(waiting.session_id, session.id, "the streamed response is marked too");
  });
});

Deno.test("a new chain whose turn is refused leaves no session: the quota's 429 keeps nothing of its input", async () => {
  using h = httpHarness();
  h.deps.dailyTokens = 1;
  await withServer(h, async ({ url }) => {
    const spent = await post(url, { model: "mini-agent", input: "hi", store: false });
    assert.equal(spent.status, 200);
    await spent.body?.cancel();
    const refused = await post(url, {
      model: "mini-agent",
      input: [{ role: "user", content: "a" }, { role: "assistant", content: "b" }, {
        role: "user",
        content: "c",
      }],
    });
    assert.equal(refused.status, 429);
    assert.equal((await refused.json()).error.code, "quota_exceeded");
  });
  assert.deepEqual(await h.store.listSessions("local"), []);
});
