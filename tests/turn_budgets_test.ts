/**
 * The limits that stop a whole turn: its token budget (AGENT_MAX_TURN_TOKENS, a closing answer with outcome
 * `budget`, like `max_steps`) and its deadline (AGENT_TURN_TIMEOUT_SECONDS, outcome `timeout`, the turn taken
 * back like an abort), through runTurn() and piped chat, on a fake clock.
 */
import assert from "node:assert/strict";
import { PassThrough } from "node:stream";
import { BUDGET_ANSWER, runTurn, TIMEOUT_ANSWER } from "../src/agent/loop.ts";
import { TurnDeadline } from "../src/agent/deadline.ts";
import { runChat } from "../src/cli/chat.ts";
import { estimateRequestTokens, estimateTokens } from "../src/memory/plan.ts";
import type { ScriptedRequest, ScriptStep } from "../src/llm/scripted.ts";
import { harness, keyOf, textSink } from "./_harness.ts";
import { FakeClock } from "./_fake_clock.ts";
import type { ToolSpec } from "../src/tools/registry.ts";

const input = (message: string) => ({ sessionId: "s1", userId: "u1", message });
const calc = (expression: string) => ({ toolCalls: [{ name: "calculator", arguments: { expression } }] });
const usage = (prompt: number, completion: number) => ({
  promptTokens: prompt,
  completionTokens: completion,
  totalTokens: prompt + completion,
  cachedTokens: null,
});

/** The estimate the loop makes of a request the scripted model saw (system prompt, tools, history). */
function estimateOf(request: ScriptedRequest): number {
  return estimateRequestTokens(request.messages, request.tools);
}

/**
 * The tokens of the requests a turn of `script` makes without a budget, as the loop counts them: the first
 * estimated, each later one the provider's count of the one before (when it reported one) plus the estimate of
 * what was added since, else estimated whole.
 */
async function requestEstimates(script: ScriptStep[], message: string): Promise<number[]> {
  using h = harness(script);
  assert.equal((await runTurn(input(message), h.agent, h.run)).outcome, "answered");
  return h.llm.requests.map((request, i) => {
    const before = script[i - 1];
    const reported = typeof before === "object" && "usage" in before ? before.usage : null;
    const counted = i === 0 ? null : reported?.promptTokens ?? null;
    if (counted === null) return estimateOf(request);
    return counted + estimateRequestTokens(request.messages.slice(h.llm.requests[i - 1].messages.length));
  });
}

Deno.test("runTurn() ends with budget before a model call that would pass AGENT_MAX_TURN_TOKENS, as reported", async () => {
  // The provider counts the first request as the loop estimates it, so the budget is what the test says.
  const [first] = await requestEstimates([{ ...calc("1+1") }, { content: "2" }], "what is 1+1?");
  const script = () => [{ ...calc("1+1"), usage: usage(first, 5) }, { content: "2", usage: usage(first, 1) }];
  const [, second] = await requestEstimates(script(), "what is 1+1?");
  const spent = first + 5;
  for (
    const [budget, outcome, calls] of [[spent + second - 1, "budget", 1], [
      spent + second,
      "answered",
      2,
    ]] as const
  ) {
    using h = harness(script());
    h.agent.maxTurnTokens = budget;
    const result = await runTurn(input("what is 1+1?"), h.agent, h.run);
    assert.equal(result.outcome, outcome, `budget ${budget}`);
    assert.equal(h.llm.requests.length, calls);
    if (outcome === "answered") continue;
    assert.equal(result.answer, BUDGET_ANSWER);
    const stored = await h.store.messages(keyOf("s1", "u1"));
    assert.deepEqual(stored.map((m) => m.role), ["user", "assistant", "tool", "assistant"]);
    assert.equal(stored.at(-1)!.content, BUDGET_ANSWER);
    const answer = h.events.find((e) => e.event === "answer")!;
    assert.deepEqual(answer.data, { text: BUDGET_ANSWER, closing: "budget" });
    assert.equal(h.events.at(-1)!.data.outcome, "budget");
  }
});

Deno.test("runTurn() counts cached prompt tokens toward AGENT_MAX_TURN_TOKENS like any other", async () => {
  const [first] = await requestEstimates([{ ...calc("1+1") }, { content: "2" }], "what is 1+1?");
  // The provider read the whole first prompt from its cache: it still counts.
  const cached = { ...usage(first, 5), cachedTokens: first };
  const script = () => [{ ...calc("1+1"), usage: cached }, { content: "2", usage: usage(first, 1) }];
  const [, second] = await requestEstimates(script(), "what is 1+1?");
  using h = harness(script());
  h.agent.maxTurnTokens = first + 5 + second - 1;
  const result = await runTurn(input("what is 1+1?"), h.agent, h.run);
  assert.equal(result.outcome, "budget");
  assert.equal(h.llm.requests.length, 1);
});

Deno.test("runTurn() sums the prompt tokens its calls wrote to the cache, traces each, and stores them within the prompt", async () => {
  const written = (prompt: number, cached: number, cacheWriteTokens: number) => ({
    ...usage(prompt, 5),
    cachedTokens: cached,
    cacheWriteTokens,
  });
  // The second call says more were written than its prompt had left after the cached ones: 200 are stored.
  const script = [{ ...calc("1+1"), usage: written(1000, 600, 300) }, {
    content: "2",
    usage: written(1100, 900, 500),
  }];
  using h = harness(script);
  const result = await runTurn(input("what is 1+1?"), h.agent, h.run);
  assert.equal(result.outcome, "answered");
  assert.equal(result.usage.cacheWriteTokens, 800, "the turn's usage as reported");
  assert.deepEqual(
    h.events.filter((e) => e.event === "llm_call").map((
      e,
    ) => [e.data.cached_tokens, e.data.cache_write_tokens]),
    [[600, 300], [900, 500]],
  );
  const [entry] = await h.store.sessionUsage(keyOf("s1", "u1"));
  assert.deepEqual([entry.promptTokens, entry.cachedTokens, entry.cacheWriteTokens], [2100, 1500, 500]);
});

Deno.test("runTurn() leaves cacheWriteTokens out of a turn's usage and at 0 in the store when no call reports it", async () => {
  using h = harness([{ content: "hi", usage: usage(100, 5) }]);
  const result = await runTurn(input("hello"), h.agent, h.run);
  assert.equal("cacheWriteTokens" in result.usage, false);
  assert.equal(h.events.find((e) => e.event === "llm_call")!.data.cache_write_tokens, null);
  assert.equal((await h.store.sessionUsage(keyOf("s1", "u1")))[0].cacheWriteTokens, 0);
});

Deno.test("runTurn() counts a call's estimated tokens toward the budget when the provider reports none", async () => {
  const script = () => [{ ...calc("2+2"), usage: null }, { content: "4", usage: null }];
  const [first, second] = await requestEstimates(script(), "what is 2+2?");
  // The first reply's own estimate: its call's name and arguments.
  const reply = estimateTokens(`calculator${JSON.stringify({ expression: "2+2" })}`);
  for (
    const [budget, outcome] of [[first + reply + second - 1, "budget"], [first + reply + second, "answered"]]
  ) {
    using h = harness(script());
    h.agent.maxTurnTokens = budget as number;
    const result = await runTurn(input("what is 2+2?"), h.agent, h.run);
    assert.equal(result.outcome, outcome, `budget ${budget}`);
  }
});

Deno.test("runTurn() makes no call at all when the first request alone would pass the budget", async () => {
  using h = harness([{ content: "never" }]);
  h.agent.maxTurnTokens = 1;
  const result = await runTurn(input("hello"), h.agent, h.run);
  assert.equal(result.outcome, "budget");
  assert.equal(h.llm.requests.length, 0);
  const stored = await h.store.messages(keyOf("s1", "u1"));
  assert.deepEqual(stored.map((m) => [m.role, m.content]), [["user", "hello"], ["assistant", BUDGET_ANSWER]]);
});

Deno.test("runTurn() rejects a budget that is not a whole number of 1 or more", async () => {
  using h = harness([]);
  for (const bad of [0, 1.5, -3]) {
    await assert.rejects(
      runTurn(input("hi"), { ...h.agent, maxTurnTokens: bad }, h.run),
      new RangeError(`maxTurnTokens must be null or an integer >= 1, got ${bad}`),
    );
  }
});

Deno.test("runTurn() ends with timeout when the deadline passes during a model call, and keeps nothing", async () => {
  const clock = new FakeClock();
  using h = harness([async () => {
    await clock.advance(30_000);
    return { content: "too late" };
  }]);
  Object.assign(h.agent, { turnTimeoutSeconds: 30, clock });
  const result = await runTurn(input("hello"), h.agent, h.run);
  assert.equal(result.outcome, "timeout");
  assert.equal(result.answer, TIMEOUT_ANSWER);
  assert.equal(result.failure?.kind, "deadline");
  assert.deepEqual(await h.store.messages(keyOf("s1", "u1")), [], "the question is taken back too");
  assert.equal((await h.store.get(keyOf("s1", "u1")))!.turnCount, 0);
  const error = h.events.find((e) => e.event === "error")!;
  assert.equal(error.data.kind, "deadline");
  assert.equal(error.data.discarded_messages, 1);
  assert.match(String(error.data.message), /time limit of 30 s \(AGENT_TURN_TIMEOUT_SECONDS\)/);
  assert.equal(h.events.at(-1)!.data.outcome, "timeout");
});

Deno.test("runTurn() ends with timeout when the deadline passes while a tool runs: calls and results taken back", async () => {
  const clock = new FakeClock();
  let sawAbort = false;
  const slow: ToolSpec = {
    name: "slow",
    description: "waits",
    parameters: { type: "object", properties: {} },
    handler: async (_args, context) => {
      await clock.advance(10_000);
      sawAbort = context.signal?.aborted === true;
      return "done";
    },
  };
  using h = harness(
    [
      {
        toolCalls: [{ name: "slow", arguments: {} }, {
          name: "calculator",
          arguments: { expression: "1+1" },
        }],
      },
      { content: "never asked" },
    ],
    { extraTools: [slow] },
  );
  Object.assign(h.agent, { turnTimeoutSeconds: 5, clock });
  const result = await runTurn(input("go"), h.agent, h.run);
  assert.equal(result.outcome, "timeout");
  assert.ok(sawAbort, "the tool's signal fired at the deadline");
  assert.equal(h.llm.requests.length, 1);
  assert.deepEqual(await h.store.messages(keyOf("s1", "u1")), []);
  const results = h.events.filter((e) => e.event === "tool_result").map((e) => e.data.error);
  assert.equal(results[1], "not run: the turn was stopped before this call started");
});

Deno.test("runTurn() leaves no deadline waiting once a turn ends in time", async () => {
  const clock = new FakeClock();
  using h = harness([{ content: "quick" }]);
  Object.assign(h.agent, { turnTimeoutSeconds: 30, clock });
  const result = await runTurn(input("hello"), h.agent, h.run);
  assert.equal(result.outcome, "answered");
  assert.equal(clock.pending, 0);
  await clock.advance(60_000);
  assert.equal((await h.store.messages(keyOf("s1", "u1"))).length, 2, "a late deadline takes nothing back");
});

Deno.test("TurnDeadline refuses a time that is not a finite number > 0, and passes its signal on without one", () => {
  for (const bad of [0, -1, Infinity, NaN]) {
    assert.throws(() => new TurnDeadline(bad), RangeError);
  }
  const own = new AbortController();
  using none = new TurnDeadline(null, { signal: own.signal });
  assert.equal(none.signal, own.signal);
});

Deno.test("piped chat prints the budget's closing answer (exit 0) and a timeout's answer (exit 1)", async () => {
  const clock = new FakeClock();
  const cases = [
    { limits: { maxTurnTokens: 1 }, script: [], code: 0, said: BUDGET_ANSWER },
    {
      limits: { turnTimeoutSeconds: 1, clock },
      script: [async () => {
        await clock.advance(1000);
        return { content: "late" };
      }],
      code: 1,
      said: TIMEOUT_ANSWER,
    },
  ];
  for (const { limits, script, code, said } of cases) {
    using h = harness(script);
    const stdin = new PassThrough();
    const output = textSink();
    const chat = runChat({
      sessionId: "piped",
      userId: "u",
      deps: { ...h.agent, ...limits },
      store: h.store,
      emit: h.run.emit,
      input: stdin,
      output: output.stream,
      status: textSink().stream,
      interactive: false,
    });
    stdin.end("hello\n");
    assert.equal(await chat, code);
    assert.equal(output.text(), `${said}\n`);
  }
});

Deno.test("runTurn() counts each call's tokens in the store, and a timed-out turn's stay counted though its messages go", async () => {
  const clock = new FakeClock();
  const slow: ToolSpec = {
    name: "slow",
    description: "waits",
    parameters: { type: "object", properties: {} },
    handler: async () => void await clock.advance(10_000),
  };
  using h = harness([
    { content: "hi", usage: usage(40, 2), model: "m-1" },
    { toolCalls: [{ name: "slow", arguments: {} }], usage: usage(100, 5), model: "m-1" },
  ], { extraTools: [slow] });
  assert.equal((await runTurn(input("hello"), h.agent, h.run)).outcome, "answered");
  Object.assign(h.agent, { turnTimeoutSeconds: 5, clock });
  assert.equal((await runTurn(input("go"), h.agent, h.run)).outcome, "timeout");
  assert.deepEqual((await h.store.messages(keyOf("s1", "u1"))).map((m) => m.content), ["hello", "hi"]);
  const counted = {
    day: "2026-01-01",
    model: "m-1",
    promptTokens: 140,
    cachedTokens: 0,
    cacheWriteTokens: 0,
    completionTokens: 7,
    calls: 2,
  };
  assert.deepEqual(await h.store.userUsage("u1"), [{ ...counted, estimatedCalls: 0 }]);
  assert.deepEqual(await h.store.sessionUsage(keyOf("s1", "u1")), [{ ...counted, estimatedCalls: 0 }]);
});
