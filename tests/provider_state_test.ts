/**
 * Provider state round-trips: what a thinking provider sends beside a reply (DeepSeek's and Kimi's
 * `reasoning_content`, Gemini's per-call thought signatures, OpenRouter's `reasoning_details`) goes back to it
 * exactly, on the message or call it came with, streamed and whole, over the loop, chat, the sessions API and
 * the OpenAI route; to no other model; and nowhere else (trace, APIs, history, summaries, memory).
 */
import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import { PassThrough } from "node:stream";
import { runTurn } from "../src/agent/loop.ts";
import { MAX_PROVIDER_STATE_BYTES } from "../src/agent/loop.ts";
import { runChat } from "../src/cli/chat.ts";
import { parseApprovalPolicy } from "../src/approval/policy.ts";
import { LlmError } from "../src/errors.ts";
import { messageJson } from "../src/session/session_json.ts";
import { HttpLLM } from "../src/llm/client.ts";
import { modelOrigin, serializeRequestBody } from "../src/llm/wire.ts";
import { createLlmSummarizer, SUMMARY_PROMPT } from "../src/memory/summarizer.ts";
import { SqliteStore } from "../src/store/sqlite.ts";
import type { LLM } from "../src/llm/llm.ts";
import type { Message } from "../src/types.ts";
import { httpHarness } from "./_http_harness.ts";
import { harness, keyOf, steppingClock, tempDir, textSink } from "./_harness.ts";
import { REFUSALS, THINKING_DIALECTS, thinkingProvider, THOUGHT } from "./_thinking_providers.ts";

const MODEL = "thinker-v4-pro";

function client(provider: { baseUrl: string; fetch: typeof fetch }, stream: boolean, model = MODEL) {
  return new HttpLLM({
    baseUrl: provider.baseUrl,
    model,
    stream,
    retries: 0,
    fetch: provider.fetch,
  });
}

/** The provider state fields of a request's assistant messages and calls, as sent. */
function stateSent(body: Record<string, unknown>): unknown[] {
  const found: unknown[] = [];
  for (const message of body.messages as Record<string, unknown>[]) {
    for (const field of ["reasoning_content", "reasoning_details", "extra_content"]) {
      if (message[field] !== undefined) found.push(message[field]);
    }
    for (const call of (message.tool_calls ?? []) as Record<string, unknown>[]) {
      if (call.extra_content !== undefined) found.push(call.extra_content);
    }
  }
  return found;
}

function assertNoThought(where: string, value: unknown): void {
  const text = typeof value === "string" ? value : JSON.stringify(value);
  assert.ok(!text.includes(THOUGHT), `no provider state in ${where}`);
}

function openDb(dir: string): SqliteStore {
  return new SqliteStore(`${dir}/sessions.db`, { now: steppingClock() });
}

for (const dialect of THINKING_DIALECTS) {
  for (const stream of [true, false]) {
    const mode = stream ? "streamed" : "whole";

    Deno.test(`${dialect} (${mode}): a tool turn answers, a later user turn still carries the state, and none of it is traced or stored as text`, async () => {
      using dir = tempDir();
      const store = openDb(dir.path);
      const provider = thinkingProvider(dialect);
      try {
        using h = harness([], { store });
        const agent = { ...h.agent, llm: client(provider, stream) };
        const deltas: string[] = [];
        const run = { ...h.run, onDelta: (text: string) => deltas.push(text) };
        const first = await runTurn(
          { sessionId: "s", userId: "u", message: "what is 6*7 and 2+3?" },
          agent,
          run,
        );
        assert.equal(first.outcome, "answered", JSON.stringify(first.failure));
        const second = await runTurn({ sessionId: "s", userId: "u", message: "and 9-4?" }, agent, run);
        assert.equal(second.outcome, "answered", JSON.stringify(second.failure));
        assert.deepEqual(provider.refused, []);
        assert.equal(provider.requests.length, 4);
        // The last request carries the first turn's state back on the first turn's message.
        const firstState = stateSent(provider.requests[1]);
        assert.ok(firstState.length > 0, "the tool step's follow-up carries the state");
        assert.deepEqual(stateSent(provider.requests[3]).slice(0, firstState.length), firstState);

        const stored = await store.messages(keyOf("s"));
        const withState = stored.filter((message) => message.providerState !== undefined);
        assert.ok(withState.length >= 2, "each tool-calling reply keeps its state");
        assert.equal(withState[0].providerState?.origin, modelOrigin(provider.baseUrl, MODEL));
        assertNoThought("the stored text", stored.map(({ providerState: _, ...message }) => message));
        assertNoThought("the events", h.events);
        assertNoThought("the deltas", deltas);
        assertNoThought("the answers", [first.answer, second.answer]);
        assertNoThought("the sessions API's messages", stored.map(messageJson));
      } finally {
        await store.close();
      }
    });

    Deno.test(`${dialect} (${mode}): the fake refuses in the provider's words when the state does not come back, or comes back on another message`, async () => {
      const provider = thinkingProvider(dialect);
      const llm = client(provider, stream);
      const ask: Message[] = [{ role: "user", content: "what is 6*7 and 2+3?" }];
      const reply = await llm.chat(ask);
      assert.ok(reply.providerState !== undefined);
      const results: Message[] = reply.toolCalls.map((call) => ({
        role: "tool",
        content: '{"ok":true,"data":{"result":1}}',
        toolCallId: call.id,
      }));
      const asked: Message = { role: "assistant", content: reply.content, toolCalls: reply.toolCalls };
      const dropped = await llm.chat([...ask, asked, ...results]).catch((error) => error);
      assert.ok(dropped instanceof LlmError && dropped.status === 400, String(dropped));
      assert.match(dropped.message, new RegExp(REFUSALS[dialect].slice(0, 30).replace(/[.*`()]/g, "\\$&")));
      // The state moved to another call (Gemini) or onto the wrong message (the others) is refused too.
      const state = reply.providerState!;
      const moved = dialect === "gemini"
        ? { ...state, calls: [null, state.calls![0]] }
        : { ...state, message: { [Object.keys(state.message!)[0]]: "another message's" } };
      const wrong = await llm.chat([...ask, { ...asked, providerState: moved }, ...results]).catch((e) => e);
      assert.ok(wrong instanceof LlmError && wrong.status === 400, String(wrong));
      // Given back as received, it is accepted.
      const right = await llm.chat([...ask, { ...asked, providerState: state }, ...results]);
      assert.match(right.content ?? "", /The answer is/);
    });
  }
}

Deno.test("after the model changes, no state goes to the new model; the old one still gets its own back", async () => {
  using dir = tempDir();
  const store = openDb(dir.path);
  const provider = thinkingProvider("deepseek");
  try {
    using h = harness([], { store });
    const ask = (llm: LLM, message: string) =>
      runTurn({ sessionId: "s", userId: "u", message }, { ...h.agent, llm }, h.run);
    assert.equal((await ask(client(provider, true), "what is 6*7?")).outcome, "answered");
    const other = thinkingProvider("deepseek", provider.baseUrl);
    assert.equal((await ask(client(other, true, "thinker-v4-flash"), "what is 2+3?")).outcome, "answered");
    assert.deepEqual(stateSent(other.requests[0]), [], "the other model's first request carries none");
    assert.equal(stateSent(other.requests[1]).length, 1, "only its own reply's state");
    const back = await ask(client(provider, false), "what is 1+1?");
    assert.equal(back.outcome, "answered", JSON.stringify(back.failure));
    assert.deepEqual(provider.refused, []);
  } finally {
    await store.close();
  }
});

Deno.test("chat: a thinking provider's tool turns answer across questions and /model; /history shows no state", async () => {
  using dir = tempDir();
  const store = openDb(dir.path);
  const provider = thinkingProvider("kimi");
  const other = thinkingProvider("kimi");
  try {
    using h = harness([], { store });
    h.agent.llm = client(provider, true);
    const input = new PassThrough();
    const output = textSink();
    const status = textSink();
    const chat = runChat({
      sessionId: "c",
      userId: "u",
      deps: h.agent,
      store: h.store,
      emit: h.run.emit,
      input,
      output: output.stream,
      status: status.stream,
      interactive: false,
      model: MODEL,
      setModel: (model) => (h.agent.llm = client(other, true, model)),
    });
    input.end("what is 6*7?\nwhat is 2+3?\n/model kimi-k3\nwhat is 9-4?\n/history\n");
    assert.equal(await chat, 0, status.text());
    assert.match(output.text(), /The answer is 42\.[^]*The answer is 5\.[^]*The answer is 5\./);
    assert.deepEqual([provider.refused, other.refused], [[], []]);
    // The first question's two replies (its call and its answer) and the second's call.
    assert.equal(stateSent(provider.requests[3]).length, 3, "the second question carries the first's state");
    assert.deepEqual(stateSent(other.requests[0]), [], "after /model, none goes to the new model");
    assertNoThought("chat's output", output.text());
    assertNoThought("chat's status lines", status.text());
  } finally {
    await store.close();
  }
});

Deno.test("the sessions API and the OpenAI route answer tool turns of a thinking provider and show none of its state", async () => {
  for (const stream of [true, false]) {
    using h = httpHarness();
    const provider = thinkingProvider("gemini");
    h.deps.agent.llm = client(provider, stream);
    const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
      h.handler(
        new Request(`http://agent.test${path}`, {
          method: "POST",
          headers: { "content-type": "application/json", ...headers },
          body: JSON.stringify(body),
        }),
      );
    for (const message of ["what is 6*7?", "what is 2+3?"]) {
      const response = await post("/v1/sessions/api/messages", { message });
      const body = await response.json();
      assert.equal(response.status, 200, JSON.stringify(body));
      assertNoThought("the turn's answer", body);
    }
    const session = await (await h.handler(new Request("http://agent.test/v1/sessions/api"))).json();
    assert.equal(session.messages.length, 8);
    assertNoThought("GET /v1/sessions/{id}", session);
    const trace = await (await h.handler(new Request("http://agent.test/v1/sessions/api/trace"))).text();
    assertNoThought("the trace route", trace);

    const ask = (content: string) => ({ model: "mini-agent", messages: [{ role: "user", content }] });
    const headers = { "X-Session-Id": "route" };
    for (const content of ["what is 6*7?", "what is 9-4?"]) {
      const response = await post("/v1/chat/completions", ask(content), headers);
      const text = await response.text();
      assert.equal(response.status, 200, text);
      assert.match(text, /The answer is/);
      assertNoThought("the OpenAI route's answer", text);
    }
    assert.deepEqual(provider.refused, []);
    assert.equal(
      stateSent(provider.requests.at(-1)!).length,
      2,
      "the route's later turn carries the earlier one's",
    );
    h.tracer.close();
    assertNoThought("the JSONL trace", Deno.readTextFileSync(h.tracePath));
  }
});

Deno.test("compaction folds the state away with its messages: the summary request sends the session's own bytes back to the same provider, the summary carries none; deleting the session deletes it", async () => {
  using dir = tempDir();
  const store = openDb(dir.path);
  const provider = thinkingProvider("openrouter");
  try {
    const llm = client(provider, false);
    using h = harness([], { store, maxRawTurns: 1, compactBatch: 1, summarizer: createLlmSummarizer(llm) });
    const agent = { ...h.agent, llm };
    for (const message of ["what is 6*7?", "what is 2+3?", "what is 9-4?"]) {
      const result = await runTurn({ sessionId: "s", userId: "u", message }, agent, h.run);
      assert.equal(result.outcome, "answered", JSON.stringify(result.failure));
      await h.agent.compactions?.idle();
    }
    type Body = { messages: { role: string; content: unknown }[]; tools?: unknown; tool_choice?: unknown };
    const bodies = provider.requests as Body[];
    const isSummary = (body: Body) => String(body.messages.at(-1)?.content).startsWith(SUMMARY_PROMPT);
    const summaries = bodies.flatMap((body, i) => isSummary(body) ? [i] : []);
    assert.ok(summaries.length > 0, "a compaction asked for a summary");
    for (const at of summaries) {
      // The turn's last request, then its answer: the summary call reads them from the provider's cache.
      const before = bodies.slice(0, at).findLast((body) => !isSummary(body))!;
      const sent = bodies[at];
      assert.deepEqual(sent.messages.slice(0, before.messages.length), before.messages);
      assert.deepEqual(sent.tools, before.tools);
      assert.equal(sent.tool_choice, "none");
    }
    assertNoThought("the stored summary", (await store.get(keyOf("s")))?.summary);
    assert.deepEqual(provider.refused, []);

    await store.deleteSession(keyOf("s"));
  } finally {
    await store.close();
  }
  const db = new DatabaseSync(`${dir.path}/sessions.db`);
  try {
    const count = (sql: string) => (db.prepare(sql).get() as { n: number }).n;
    assert.equal(count("SELECT count(*) AS n FROM messages WHERE provider_state IS NOT NULL"), 0);
    assert.equal(count("SELECT count(*) AS n FROM pending_steps"), 0);
  } finally {
    db.close();
  }
});

Deno.test("a provider state over the byte cap is dropped: the llm_call event gives its size only", async () => {
  const huge = "x".repeat(MAX_PROVIDER_STATE_BYTES);
  const fetch = (_url: string | URL | Request, init?: RequestInit) => {
    const body = JSON.parse(String(init?.body));
    const last = body.messages.at(-1);
    const message = last.role === "tool"
      ? { role: "assistant", content: "done", reasoning_content: `${THOUGHT} small` }
      : {
        role: "assistant",
        content: null,
        reasoning_content: `${THOUGHT}${huge}`,
        tool_calls: [{
          id: "c1",
          type: "function",
          function: { name: "calculator", arguments: '{"expression":"1+1"}' },
        }],
      };
    return Promise.resolve(
      Response.json({ model: MODEL, choices: [{ index: 0, message, finish_reason: "stop" }] }),
    );
  };
  using h = harness([]);
  const llm = new HttpLLM({
    baseUrl: "https://big.example/v1",
    model: MODEL,
    fetch,
    retries: 0,
    maxReplyBytes: 2 ** 21,
  });
  const result = await runTurn({ sessionId: "s", userId: "u", message: "1+1?" }, { ...h.agent, llm }, h.run);
  assert.equal(result.outcome, "answered");
  const calls = h.events.filter((event) => event.event === "llm_call").map((event) => event.data);
  assert.equal(calls[0].provider_state_dropped, true);
  assert.ok((calls[0].provider_state_bytes as number) > MAX_PROVIDER_STATE_BYTES);
  assert.equal(calls[1].provider_state_dropped, undefined);
  const stored = await h.store.messages(keyOf("s"));
  assert.deepEqual(stored.map((message) => message.providerState !== undefined), [false, false, false, true]);
  assertNoThought("the events", h.events);
});

Deno.test("serializeRequestBody sends a message's state only to its origin, and caches each origin's JSON apart", () => {
  const origin = modelOrigin("https://a.example/v1/", "Thinker-2026-01-02");
  assert.equal(origin, modelOrigin("https://a.example/v1", "thinker"), "a dated name is its family");
  const message: Message = Object.freeze({
    role: "assistant",
    content: null,
    toolCalls: Object.freeze([Object.freeze({ id: "c", name: "calculator", arguments: "{}" })]) as never,
    providerState: Object.freeze({
      origin,
      message: Object.freeze({ reasoning_content: "r" }),
      calls: Object.freeze([Object.freeze({ extra_content: Object.freeze({ google: "s" }) })]),
    }),
  });
  const to = (target: string) =>
    JSON.parse(serializeRequestBody("m", [message], [], { origin: target })).messages[0];
  assert.deepEqual(to(origin), {
    role: "assistant",
    content: null,
    reasoning_content: "r",
    tool_calls: [{
      id: "c",
      type: "function",
      function: { name: "calculator", arguments: "{}" },
      extra_content: { google: "s" },
    }],
  });
  assert.deepEqual(stateSent({ messages: [to(modelOrigin("https://b.example/v1", "thinker"))] }), []);
  assert.deepEqual(stateSent({ messages: [to(modelOrigin("https://a.example/v1", "other"))] }), []);
  assert.equal(to(origin).reasoning_content, "r", "the first origin's JSON is still right after another's");
});

Deno.test("a step that waits for approval keeps its state: the resumed turn sends it back on the stored message", async () => {
  for (const stream of [true, false]) {
    using dir = tempDir();
    const store = openDb(dir.path);
    const provider = thinkingProvider("deepseek");
    try {
      using h = harness([], { store });
      const agent = {
        ...h.agent,
        llm: client(provider, stream),
        approval: parseApprovalPolicy({ tools: { calculator: "ask" } }),
      };
      const paused = await runTurn({ sessionId: "s", userId: "u", message: "what is 6*7?" }, agent, h.run);
      assert.equal(paused.outcome, "awaiting_approval");
      assert.ok(
        (await store.pendingStep(keyOf("s")))?.providerState !== undefined,
        "the paused step keeps it",
      );
      const [call] = paused.approval!.calls;
      const resumed = await runTurn(
        { sessionId: "s", userId: "u", decisions: { [call.id]: "approve" } },
        agent,
        h.run,
      );
      assert.equal(resumed.outcome, "answered", JSON.stringify(resumed.failure));
      assert.deepEqual(provider.refused, []);
      assert.equal(stateSent(provider.requests[1]).length, 1);
      assertNoThought("the events", h.events);
    } finally {
      await store.close();
    }
  }
});
