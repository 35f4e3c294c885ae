/**
 * The daily token quota (AGENT_USER_DAILY_TOKENS) and `GET /v1/usage` through the real handler: a user past
 * the quota gets 429 `quota_exceeded` with `Retry-After` at the next UTC midnight on the sessions API and the
 * OpenAI-compatible route alike (kept and private sessions, JSON and streamed), nothing stored; the counts the
 * quota reads are the store's, written by every kind of turn.
 */
import assert from "node:assert/strict";
import { type HttpHarness, httpHarness, postMessage } from "./_http_harness.ts";
import { keyOf } from "./_harness.ts";

/** 22:00 UTC: two hours before the next day. */
const EVENING = Date.parse("2026-03-01T22:00:00Z");

/** A harness whose clock reads `at.value` and whose users may spend `limit` tokens a day. */
function quotaHarness(limit: number | null, at: { value: number }): HttpHarness {
  const h = httpHarness();
  h.deps.agent.now = () => new Date(at.value);
  h.deps.dailyTokens = limit;
  return h;
}

function completion(message: string, options: { session?: string; stream?: boolean } = {}): Request {
  const { session, stream = false } = options;
  return new Request("http://agent.test/v1/chat/completions", {
    method: "POST",
    headers: { "content-type": "application/json", ...(session ? { "x-session-id": session } : {}) },
    body: JSON.stringify({ model: "mini-agent", messages: [{ role: "user", content: message }], stream }),
  });
}

Deno.test("a user past AGENT_USER_DAILY_TOKENS gets 429 quota_exceeded until 00:00 UTC, in both APIs, nothing stored", async () => {
  const at = { value: EVENING };
  using h = quotaHarness(20, at);
  // Each model call of the rule model reports 12 tokens: two turns pass 20.
  assert.equal((await h.handler(postMessage("a", { message: "hello" }))).status, 200);
  assert.equal((await h.handler(completion("hi", { session: "b" }))).status, 200);
  const requests = [
    postMessage("a", { message: "again" }),
    postMessage("a", { message: "again" }, { accept: "text/event-stream" }),
    completion("again", { session: "b" }),
    completion("again", { session: "b", stream: true }),
    completion("again"),
  ];
  for (const [i, request] of requests.entries()) {
    const response = await h.handler(request);
    assert.equal(response.status, 429, `request ${i}`);
    assert.equal(response.headers.get("retry-after"), "7200", `request ${i}`);
    const body = await response.json();
    assert.equal(body.error.code, "quota_exceeded", `request ${i}`);
    assert.match(body.error.message, /has spent 24 tokens today \(UTC\), the daily quota is 20/);
  }
  assert.equal(h.llm.calls, 2, "no turn ran");
  assert.equal((await h.store.messages(keyOf("a", "local"))).length, 2, "nothing stored");
  assert.equal((await h.store.messages(keyOf("b", "local"))).length, 2);
  // A new UTC day starts the count again.
  at.value = Date.parse("2026-03-02T00:00:00Z");
  assert.equal((await h.handler(postMessage("a", { message: "next day" }))).status, 200);
});

Deno.test("the daily quota counts the prompt tokens read from the provider's cache or written to it like the others", async () => {
  const at = { value: EVENING };
  using h = quotaHarness(20, at);
  await h.store.recordUsage(keyOf("a", "local"), [{
    day: "2026-03-01",
    model: "rule",
    promptTokens: 20,
    cachedTokens: 12,
    cacheWriteTokens: 8,
    completionTokens: 0,
    calls: 1,
    estimatedCalls: 0,
  }]);
  const response = await h.handler(postMessage("a", { message: "hello" }));
  assert.equal(response.status, 429);
  assert.match((await response.json()).error.message, /has spent 20 tokens today/);
  const page = await (await h.handler(new Request("http://agent.test/v1/usage"))).json();
  const { today } = page;
  assert.deepEqual([today.total_tokens, today.cached_tokens, today.cache_write_tokens, today.left], [
    20,
    12,
    8,
    0,
  ]);
});

Deno.test("the quota is each user's own, and absent without AGENT_USER_DAILY_TOKENS", async () => {
  const at = { value: EVENING };
  {
    using h = quotaHarness(10, at);
    await h.store.recordUsage(keyOf("x", "someone-else"), [{
      day: "2026-03-01",
      model: "rule",
      promptTokens: 1000,
      cachedTokens: 0,
      cacheWriteTokens: 0,
      completionTokens: 0,
      calls: 1,
      estimatedCalls: 0,
    }]);
    assert.equal((await h.handler(postMessage("a", { message: "hello" }))).status, 200);
  }
  {
    using h = quotaHarness(null, at);
    for (let i = 0; i < 3; i++) {
      assert.equal((await h.handler(postMessage("a", { message: `hello ${i}` }))).status, 200);
    }
  }
});

Deno.test("a chat completion without a session counts its tokens in the server's store, for the user", async () => {
  const at = { value: EVENING };
  using h = quotaHarness(null, at);
  const response = await h.handler(completion("what is 2+3?"));
  assert.equal(response.status, 200);
  assert.equal((await response.json()).usage.total_tokens, 24);
  assert.deepEqual(await h.store.userUsage("local"), [
    {
      day: "2026-03-01",
      model: "rule",
      promptTokens: 20,
      cachedTokens: 0,
      cacheWriteTokens: 0,
      completionTokens: 4,
      calls: 2,
      estimatedCalls: 0,
    },
  ]);
  assert.deepEqual(await h.store.listSessions("local"), [], "the private session is not kept");
});

Deno.test("GET /v1/usage gives the caller's tokens by day and model, and today's against the quota", async () => {
  const at = { value: Date.parse("2026-02-28T12:00:00Z") };
  using h = quotaHarness(100, at);
  await h.handler(postMessage("a", { message: "what is 1+1?" })); // two calls: 24 tokens
  at.value = EVENING;
  await h.handler(postMessage("a", { message: "hello" })); // one call: 12 tokens
  await h.store.recordUsage(keyOf("a", "local"), [{
    day: "2026-03-01",
    model: "other",
    promptTokens: 3,
    cachedTokens: 0,
    cacheWriteTokens: 2,
    completionTokens: 1,
    calls: 1,
    estimatedCalls: 1,
  }]);
  const response = await h.handler(new Request("http://agent.test/v1/usage"));
  assert.equal(response.status, 200);
  const today = () => ({
    day: "2026-03-01",
    total_tokens: 16,
    cached_tokens: 0,
    cache_write_tokens: 2,
    daily_tokens: 100,
    left: 84,
  });
  const row = (
    model: string,
    prompt: number,
    completion: number,
    calls: number,
    estimated = 0,
    written = 0,
  ) => ({
    model,
    prompt_tokens: prompt,
    cached_tokens: 0,
    cache_write_tokens: written,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    calls,
    estimated_calls: estimated,
  });
  assert.deepEqual(await response.json(), {
    user_id: "local",
    from: "2026-01-31",
    to: "2026-03-01",
    days: [
      {
        day: "2026-02-28",
        total_tokens: 24,
        cached_tokens: 0,
        cache_write_tokens: 0,
        models: [row("rule", 20, 4, 2)],
      },
      {
        day: "2026-03-01",
        total_tokens: 16,
        cached_tokens: 0,
        cache_write_tokens: 2,
        models: [row("other", 3, 1, 1, 1, 2), row("rule", 10, 2, 1)],
      },
    ],
    today: today(),
  });
  // The served OpenAPI document names every field of the page, the cache-written tokens too.
  const doc = await (await h.handler(new Request("http://agent.test/openapi.json"))).json();
  const page = doc.paths["/v1/usage"].get.responses["200"].content["application/json"].schema.properties;
  const day = page.days.items.properties;
  const keys = (o: object) => Object.keys(o).sort();
  const totals = ["cache_write_tokens", "cached_tokens", "cost_usd", "day", "total_tokens"];
  assert.deepEqual(keys(page.today.properties), keys({ ...today(), cost_usd: null }));
  assert.deepEqual(keys(day), [...totals, "models"].sort());
  assert.deepEqual(keys(day.models.items.properties), keys({ ...row("m", 0, 0, 0), cost_usd: null }));
  const one = await h.handler(new Request("http://agent.test/v1/usage?from=2026-02-28&to=2026-02-28"));
  assert.deepEqual((await one.json()).days.map((d: { day: string }) => d.day), ["2026-02-28"]);
  for (const query of ["from=2026-2-1", "to=tomorrow", "from=2026-02-30", "from=2026-03-02&to=2026-03-01"]) {
    const bad = await h.handler(new Request(`http://agent.test/v1/usage?${query}`));
    assert.equal(bad.status, 400, query);
    assert.equal((await bad.json()).error.code, "invalid_query");
  }
});

Deno.test("GET /v1/usage answers each token holder with its own user's counts", async () => {
  const tokens = [
    { token: "alice-token-0123456789", userId: "alice" },
    { token: "bob-token-0123456789ab", userId: "bob" },
  ];
  using h = httpHarness({ tokens });
  const as = (token: string, request: Request) => {
    const headers = new Headers(request.headers);
    headers.set("authorization", `Bearer ${token}`);
    return new Request(request, { headers });
  };
  await h.handler(as(tokens[0].token, postMessage("a", { message: "hello" })));
  const alice = await (await h.handler(as(tokens[0].token, new Request("http://agent.test/v1/usage"))))
    .json();
  const bob = await (await h.handler(as(tokens[1].token, new Request("http://agent.test/v1/usage")))).json();
  assert.equal(alice.days.length, 1);
  assert.deepEqual([bob.user_id, bob.days], ["bob", []]);
  assert.equal((await h.handler(new Request("http://agent.test/v1/usage"))).status, 401);
});
