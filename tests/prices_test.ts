/**
 * The price table (AGENT_PRICES) and the costs it gives: the table's rules, then the cost where it shows, in a
 * turn's `run_end`, chat's `/usage`, `GET /v1/usage` and the web page's timeline.
 */
import assert from "node:assert/strict";
import { costOf, parsePrices, priceOf } from "../src/prices.ts";
import { runTurn } from "../src/agent/loop.ts";
import { type ChatState, runCommand } from "../src/cli/commands.ts";
import { formatCost } from "../src/text/cost.js";
import { buildTimeline } from "../src/web/timeline.js";
import type { UsageEntry } from "../src/types.ts";
import { harness } from "./_harness.ts";
import { httpHarness, postMessage } from "./_http_harness.ts";

const usage = (prompt: number, completion: number) => ({
  promptTokens: prompt,
  completionTokens: completion,
  totalTokens: prompt + completion,
  cachedTokens: null,
});

function entry(model: string, prompt: number, completion: number, cached = 0, written = 0): UsageEntry {
  return {
    day: "2026-01-01",
    model,
    promptTokens: prompt,
    cachedTokens: cached,
    cacheWriteTokens: written,
    completionTokens: completion,
    calls: 1,
    estimatedCalls: 0,
  };
}

Deno.test("parsePrices() reads model=in/out, model=in/out/cached and model=in/out/cached/write entries and refuses anything else, naming the entry", () => {
  assert.deepEqual(parsePrices(""), new Map());
  assert.deepEqual(
    parsePrices("gpt-4o-mini=0.15/0.6,deepseek-chat=0.27/1.10"),
    new Map([["gpt-4o-mini", { input: 0.15, output: 0.6 }], ["deepseek-chat", { input: 0.27, output: 1.1 }]]),
  );
  assert.deepEqual(
    parsePrices("gpt-4o-mini=0.15/0.6/0.075, deepseek-chat = 0.27 / 1.10 / 0.07"),
    new Map([
      ["gpt-4o-mini", { input: 0.15, output: 0.6, cached: 0.075 }],
      ["deepseek-chat", { input: 0.27, output: 1.1, cached: 0.07 }],
    ]),
  );
  assert.deepEqual(
    parsePrices("claude-sonnet-4-5=3/15/0.30/3.75"),
    new Map([["claude-sonnet-4-5", { input: 3, output: 15, cached: 0.3, write: 3.75 }]]),
  );
  // A model name may hold "=", "/" or ":" (a router's names): the last "=" separates the prices.
  assert.deepEqual([...parsePrices("org/model:free=0/0").keys()], ["org/model:free"]);
  for (
    const [raw, why] of [
      [
        "gpt=1",
        /entry 1 \("gpt=1"\) is not model=in\/out, model=in\/out\/cached or model=in\/out\/cached\/write/,
      ],
      ["gpt=1/2/3/4/5", /entry 1/],
      ["gpt=1/2/3/", /entry 1/],
      ["gpt=1/2/3/x", /entry 1/],
      ["gpt=1/2//4", /entry 1/],
      ["gpt=1/2/", /entry 1/],
      ["gpt=1/2/x", /entry 1/],
      ["gpt=1/2/-0.5", /entry 1/],
      ["a=1/2,=1/2", /entry 2/],
      ["a=1/2,", /entry 2/],
      ["a=-1/2", /entry 1/],
      ["a=1/x", /entry 1/],
      ["a=1/2,a=3/4", /entry 2 names model "a" a second time/],
    ] as const
  ) {
    assert.throws(
      () => parsePrices(raw),
      (error: Error) => error instanceof SyntaxError && why.test(error.message),
    );
  }
});

Deno.test("priceOf() takes the model's own entry, else the longest base name of a dated or tagged name", () => {
  const table = parsePrices("gpt-4o=2.5/10,gpt-4o-mini=0.15/0.6,llama3=0/0");
  assert.deepEqual(priceOf(table, "gpt-4o-mini"), { input: 0.15, output: 0.6 });
  assert.deepEqual(priceOf(table, "gpt-4o-mini-2024-07-18"), { input: 0.15, output: 0.6 });
  assert.deepEqual(priceOf(table, "gpt-4o-2024-08-06"), { input: 2.5, output: 10 });
  assert.deepEqual(priceOf(table, "llama3:8b"), { input: 0, output: 0 });
  assert.equal(priceOf(table, "gpt-4"), null);
  assert.equal(priceOf(table, "gpt-4omni"), null, "a longer word is another model");
});

Deno.test("costOf() sums dollars per million tokens, and is null when a model with tokens has no price", () => {
  const table = parsePrices("a=1/2,b=0.5/4");
  assert.equal(costOf(table, [entry("a", 1_000_000, 500_000), entry("b", 2000, 1000)]), 2 + 0.001 + 0.004);
  assert.equal(costOf(table, [entry("a", 3, 0)]), 0.000003);
  assert.equal(costOf(table, [entry("a", 10, 0), entry("c", 1, 0)]), null);
  assert.equal(costOf(table, [entry("c", 0, 0)]), 0, "no tokens, no price needed");
  assert.equal(costOf(table, []), 0);
});

Deno.test("costOf() prices cached prompt tokens at the cached price, the rest of the prompt at the input price", () => {
  const cached = parsePrices("a=1/2/0.1");
  // 200,000 uncached at $1, 800,000 cached at $0.10, 500,000 out at $2 per million.
  assert.equal(costOf(cached, [entry("a", 1_000_000, 500_000, 800_000)]), 0.2 + 0.08 + 1);
  assert.equal(
    costOf(cached, [entry("a", 1_000_000, 0, 1_000_000)]),
    0.1,
    "a prompt read whole from the cache",
  );
  // Without a cached price, cached tokens cost what the others do.
  assert.equal(costOf(parsePrices("a=1/2"), [entry("a", 1_000_000, 500_000, 800_000)]), 2);
  assert.equal(costOf(cached, [entry("a", 3, 0)]), 0.000003, "no cached tokens: the input price");
});

Deno.test("costOf() prices prompt tokens written to the cache at the write price, else at the input price", () => {
  const table = parsePrices("claude=3/15/0.30/3.75");
  // 100,000 uncached at $3, 800,000 read at $0.30, 100,000 written at $3.75, 10,000 out at $15 per million.
  assert.equal(
    costOf(table, [entry("claude", 1_000_000, 10_000, 800_000, 100_000)]),
    0.3 + 0.24 + 0.375 + 0.15,
  );
  assert.equal(costOf(table, [entry("claude", 1_000_000, 0, 0, 1_000_000)]), 3.75, "a prompt written whole");
  // Without a write price, written tokens cost what the uncached ones do; the cached price still holds.
  assert.equal(
    costOf(parsePrices("claude=3/15/0.30"), [entry("claude", 1_000_000, 0, 800_000, 100_000)]),
    0.84,
  );
  assert.equal(costOf(parsePrices("claude=3/15"), [entry("claude", 1_000_000, 0, 0, 1_000_000)]), 3);
});

Deno.test("formatCost() writes dollars to three significant digits (two to eight decimals), and $? when unknown", () => {
  assert.deepEqual(
    [0, 2.5, 0.0123456, 0.000003, 12.3456, null].map(formatCost),
    ["$0", "$2.500", "$0.01235", "$0.00000300", "$12.35", "$?"],
  );
});

Deno.test("run_end carries the turn's cost with AGENT_PRICES (null for a model without a price), none without", async () => {
  const script = () => [
    {
      toolCalls: [{ name: "calculator", arguments: { expression: "1+1" } }],
      usage: usage(1000, 100),
      model: "m-1",
    },
    { content: "2", usage: usage(2000, 10), model: "m-1-2026" },
  ];
  const cases = [
    { prices: parsePrices("m-1=1/10"), cost: (3000 * 1 + 110 * 10) / 1e6 },
    { prices: parsePrices("other=1/1"), cost: null },
    { prices: undefined, cost: undefined },
  ];
  for (const { prices, cost } of cases) {
    using h = harness(script());
    const result = await runTurn(
      { sessionId: "s", userId: "u", message: "1+1?" },
      { ...h.agent, prices },
      h.run,
    );
    assert.equal(result.outcome, "answered");
    const end = h.events.at(-1)!;
    assert.equal(end.event, "run_end");
    assert.equal(end.data.cost_usd, cost);
    assert.equal("cost_usd" in end.data, cost !== undefined);
  }
});

Deno.test("run_end prices the turn's cached prompt tokens at the cached price; an estimated call has none", async () => {
  const cached = { promptTokens: 1000, completionTokens: 100, totalTokens: 1100, cachedTokens: 800 };
  const script = [
    { toolCalls: [{ name: "calculator", arguments: { expression: "1+1" } }], usage: cached, model: "m-1" },
    { content: "2", usage: null, model: "m-1" },
  ];
  using h = harness(script);
  const prices = parsePrices("m-1=1/10/0.25");
  const result = await runTurn(
    { sessionId: "s", userId: "u", message: "1+1?" },
    { ...h.agent, prices },
    h.run,
  );
  assert.equal(result.outcome, "answered");
  assert.equal(result.usage.cachedTokens, 800);
  const [entry] = await h.store.sessionUsage({ sessionId: "s", userId: "u" });
  assert.equal(entry.cachedTokens, 800, "the estimated call adds no cached tokens");
  const estimated = entry.promptTokens - 1000;
  assert.ok(estimated > 0);
  const cost = (200 * 1 + 800 * 0.25 + estimated * 1 + entry.completionTokens * 10) / 1e6;
  assert.equal(h.events.at(-1)!.data.cost_usd, Math.round(cost * 1e8) / 1e8);
});

Deno.test("run_end prices the turn's prompt tokens written to the cache at the write price", async () => {
  const usage = {
    promptTokens: 2000,
    completionTokens: 100,
    totalTokens: 2100,
    cachedTokens: 800,
    cacheWriteTokens: 1000,
  };
  using h = harness([{ content: "hi", usage, model: "claude-x" }]);
  const prices = parsePrices("claude-x=3/15/0.30/3.75");
  const result = await runTurn(
    { sessionId: "s", userId: "u", message: "hello" },
    { ...h.agent, prices },
    h.run,
  );
  assert.equal(result.outcome, "answered");
  assert.equal(result.usage.cacheWriteTokens, 1000);
  const [entry] = await h.store.sessionUsage({ sessionId: "s", userId: "u" });
  assert.deepEqual([entry.cachedTokens, entry.cacheWriteTokens], [800, 1000]);
  const cost = (200 * 3 + 800 * 0.3 + 1000 * 3.75 + 100 * 15) / 1e6;
  assert.equal(h.events.at(-1)!.data.cost_usd, Math.round(cost * 1e8) / 1e8);
});

Deno.test("chat's /usage adds the session's cost with AGENT_PRICES", async () => {
  using h = harness([{ content: "hi", usage: usage(1_000_000, 1000), model: "m" }]);
  await runTurn({ sessionId: "main", userId: "local", message: "hello" }, h.agent, h.run);
  const state: ChatState = { sessionId: "main", userId: "local", lastTurn: null };
  for (
    const [prices, said] of [["m=0.15/0.6", /completion\) over 1 model call, \$0\.1506, as stored/], [
      "x=1/1",
      /cost unknown/,
    ]] as const
  ) {
    let text = "";
    await runCommand("/usage", {
      state,
      store: h.store,
      prices: parsePrices(prices),
      write: (line) => (text += line),
      clearScreen: () => {},
      newSessionId: () => "n",
    });
    assert.match(text, said);
  }
});

Deno.test("GET /v1/usage gives a cost per model, day and today with AGENT_PRICES", async () => {
  using h = httpHarness();
  h.deps.agent.prices = parsePrices("rule=1/10");
  await h.handler(postMessage("a", { message: "hello" })); // one call: 10 prompt + 2 completion
  const body = await (await h.handler(new Request("http://agent.test/v1/usage"))).json();
  assert.equal(body.days[0].models[0].cost_usd, 0.00003);
  assert.equal(body.days[0].cost_usd, 0.00003);
  assert.equal(body.today.cost_usd, 0.00003);
});

Deno.test("the web page's timeline shows a run's cost from run_end, and nothing without one", () => {
  const run = (data: Record<string, unknown>) => [
    {
      ts: "2026-01-01T00:00:00.000Z",
      run_id: "r",
      turn: 1,
      event: "run_start",
      step: null,
      data: { message: "hi" },
    },
    { ts: "2026-01-01T00:00:00.010Z", run_id: "r", turn: 1, event: "run_end", step: null, data },
  ];
  const base = { outcome: "answered", steps: 1, tool_calls: 0, usage: { total_tokens: 12 } };
  assert.equal(buildTimeline(run({ ...base, cost_usd: 0.00003 })).cost, 0.00003);
  assert.equal(buildTimeline(run({ ...base, cost_usd: null })).cost, null);
  assert.equal(buildTimeline(run(base)).cost, undefined);
});
