/**
 * Every provider's dialect of the Chat Completions wire (tests/fixtures/dialects/), replayed from a loopback
 * server, streamed and whole: through the real client, and through a turn on a SQLite store; those that say
 * how many prompt tokens the provider read from its cache, through `serve`'s handler on both stores, to the
 * trace, the counts, chat's `/usage` and `GET /v1/usage` with their cost.
 */
import assert from "node:assert/strict";
import { runTurn } from "../src/agent/loop.ts";
import { runCommand } from "../src/cli/commands.ts";
import { LlmError } from "../src/errors.ts";
import { HttpLLM } from "../src/llm/client.ts";
import { ReplyAssembler } from "../src/llm/stream.ts";
import { parseCompletion } from "../src/llm/wire.ts";
import { parsePrices } from "../src/prices.ts";
import { SqliteStore } from "../src/store/sqlite.ts";
import { readTrace } from "../src/trace/trace.ts";
import type { ChatReply, ToolSchema } from "../src/types.ts";
import { formatCost } from "../src/text/cost.js";
import { type Dialect, DIALECTS, MARKER, readDialects, replayProvider } from "./_dialects.ts";
import { harness, keyOf, steppingClock, tempDir } from "./_harness.ts";
import { httpHarness, postMessage } from "./_http_harness.ts";
import { HELLO, KEY, MODEL } from "./_openai_stubs.ts";
import { storeTest } from "./_store_backends.ts";

const dialects = readDialects();

/** The dialects whose providers send reasoning text: their fixtures must carry the marker. */
const REASONING = ["deepseek", "groq", "llamacpp", "mistral", "moonshot", "ollama", "qwen", "vllm", "xai"];
/**
 * Whether the dialect's replies, as sent in `mode`, carry `reasoning_content`: provider state, sent back to
 * that provider (vLLM streams it as `reasoning`, which is not).
 */
function sendsState(dialect: (typeof dialects)[number], stream: boolean): boolean {
  return dialect.replies.some((reply) =>
    JSON.stringify(stream ? reply.stream : reply.body).includes("reasoning_content")
  );
}

/** A request body's messages without the provider state fields of its assistant messages. */
function withoutState(body: string): unknown {
  const { messages } = JSON.parse(body) as { messages: Record<string, unknown>[] };
  return messages.map((message) => {
    const { reasoning_content: _r, reasoning_details: _d, extra_content: _e, ...rest } = message;
    return rest;
  });
}

const TOOLS: ToolSchema[] = [{
  name: "calculator",
  description: "Evaluates an arithmetic expression.",
  parameters: { type: "object", properties: { expression: { type: "string" } }, required: ["expression"] },
}];

function tokens(reply: ChatReply): unknown {
  const { usage } = reply;
  return usage === null ? null : [usage.promptTokens, usage.completionTokens, usage.totalTokens];
}

/** The sum of `counts`, a count not given as 0. */
function sum(counts: readonly (number | null)[]): number {
  return counts.reduce((total: number, n) => total + (n ?? 0), 0);
}

function client(url: string, stream: boolean): HttpLLM {
  return new HttpLLM({ baseUrl: url, apiKey: KEY, model: MODEL, stream, retries: 0 });
}

Deno.test("the dialect fixtures cover thirteen providers, each reasoning one with the marker in its replies", () => {
  assert.deepEqual(dialects.map((dialect) => dialect.name), [
    "anthropic",
    "azure",
    "deepseek",
    "gemini",
    "groq",
    "llamacpp",
    "mistral",
    "moonshot",
    "ollama",
    "openai",
    "qwen",
    "vllm",
    "xai",
  ]);
  assert.deepEqual(
    dialects.filter((dialect) => sendsState(dialect, false)).map((dialect) => dialect.name),
    ["deepseek", "llamacpp", "moonshot", "qwen", "vllm", "xai"],
  );
  for (const dialect of dialects) {
    assert.equal(dialect.replies.length, 2, dialect.name);
    for (const [i, reply] of dialect.replies.entries()) {
      const [stream, body] = [JSON.stringify(reply.stream), JSON.stringify(reply.body)];
      const reasoning = REASONING.includes(dialect.name);
      assert.equal(stream.includes(MARKER), reasoning, `${dialect.name} reply ${i} streamed`);
      assert.equal(body.includes(MARKER), reasoning, `${dialect.name} reply ${i} whole`);
    }
  }
  assert.ok(Deno.statSync(new URL("README.md", DIALECTS)).isFile);
});

for (const dialect of dialects) {
  const { expect } = dialect;
  for (const stream of [true, false]) {
    const mode = stream ? "streamed" : "whole";

    Deno.test(`HttpLLM reads ${dialect.name}'s ${mode} tool call and answer, keeping reasoning only as provider state`, async () => {
      const provider = replayProvider(dialect.replies);
      try {
        const llm = client(provider.url, stream);
        const deltas: string[] = [];
        const onDelta = (text: string) => deltas.push(text);
        const call = await llm.chat(HELLO, { tools: TOOLS, onDelta });
        assert.equal(call.content, expect.call_text);
        assert.deepEqual(call.toolCalls, expect.calls);
        assert.deepEqual(tokens(call), expect.usage[0]);
        assert.equal(
          call.usage?.cachedTokens,
          expect.cached[0],
          "the cached prompt tokens, as the provider said",
        );
        const answer = await llm.chat(HELLO, { tools: TOOLS, onDelta });
        assert.equal(answer.content, expect.answer);
        assert.deepEqual(answer.toolCalls, []);
        assert.deepEqual(tokens(answer), expect.usage[1]);
        assert.equal(answer.usage?.cachedTokens, expect.cached[1]);
        assert.equal(deltas.join(""), stream ? `${expect.call_text ?? ""}${expect.answer}` : "");
        const { providerState: callState, ...callSeen } = call;
        const { providerState: answerState, ...answerSeen } = answer;
        assert.ok(
          !JSON.stringify([callSeen, answerSeen, deltas]).includes(MARKER),
          "no reasoning in a reply's content, calls or deltas",
        );
        const kept = sendsState(dialect, stream);
        assert.equal(JSON.stringify(callState ?? null).includes(MARKER), kept, "reasoning_content is state");
        assert.equal(JSON.stringify(answerState ?? null).includes(MARKER), kept);
      } finally {
        await provider.close();
      }
    });

    Deno.test(`runTurn() answers through ${dialect.name}'s ${mode} replies: each call runs once, usage is traced, reasoning only goes back as provider state`, async () => {
      using dir = tempDir();
      const store = new SqliteStore(`${dir.path}/sessions.db`, { now: steppingClock() });
      const provider = replayProvider(dialect.replies);
      try {
        using h = harness([], { store });
        const deltas: string[] = [];
        const result = await runTurn(
          { sessionId: dialect.name, userId: "u", message: "what is 6*7?" },
          { ...h.agent, llm: client(provider.url, stream) },
          { ...h.run, onDelta: (text) => deltas.push(text) },
        );
        assert.equal(result.outcome, "answered", JSON.stringify(result.failure));
        assert.equal(result.answer, expect.answer);

        const ids = expect.calls.map((call) => call.id);
        const stored = await store.messages(keyOf(dialect.name));
        assert.deepEqual(stored.map((message) => message.role), [
          "user",
          "assistant",
          ...ids.map(() => "tool"),
          "assistant",
        ]);
        const [, asked] = stored;
        assert.equal(asked.content, expect.call_text);
        assert.deepEqual(asked.toolCalls, expect.calls, "each call with its own id and arguments");
        const results = stored.filter((message) => message.role === "tool");
        assert.deepEqual(results.map((message) => message.toolCallId), ids, "each call answered once");
        assert.ok(results.every((message) => JSON.parse(message.content ?? "").ok), "every call ran");
        assert.deepEqual(
          h.events.filter((event) => event.event === "tool_call").map((event) => event.data.arguments),
          expect.calls.map((call) => call.arguments),
        );

        const usage = h.events.filter((event) => event.event === "llm_call").map((event) => {
          const { prompt_tokens, completion_tokens, total_tokens } = event.data;
          return [prompt_tokens, completion_tokens, total_tokens];
        });
        assert.deepEqual(usage, expect.usage, "llm_call records the usage wherever the provider put it");
        assert.deepEqual(
          h.events.filter((event) => event.event === "llm_call").map((event) => event.data.cached_tokens),
          expect.cached,
          "llm_call records the cached prompt tokens, null where the provider did not say",
        );
        const [counted] = await store.sessionUsage(keyOf(dialect.name));
        assert.equal(counted.cachedTokens, sum(expect.cached), "the store counts them, 0 for none said");

        // The follow-up request carries the calls back, each with its one result, and nothing else new.
        assert.equal(provider.requests.length, 2);
        const sent = JSON.parse(provider.requests[1]).messages as {
          role: string;
          tool_calls?: { id: string }[];
          tool_call_id?: string;
        }[];
        assert.deepEqual(sent.find((message) => message.tool_calls)?.tool_calls?.map((call) => call.id), ids);
        assert.deepEqual(sent.filter((message) => message.role === "tool").map((m) => m.tool_call_id), ids);

        const seen: [string, string][] = [
          ["the stored messages", JSON.stringify(stored.map(({ providerState: _, ...message }) => message))],
          ["the events", JSON.stringify(h.events)],
          ["the deltas", deltas.join("")],
          ["the requests sent", JSON.stringify(provider.requests.map(withoutState))],
        ];
        for (const [where, text] of seen) assert.ok(!text.includes(MARKER), `no reasoning in ${where}`);
        // What a provider sent as reasoning_content goes back to it, on the message that carried it.
        const backed = sent.find((message) => message.tool_calls) as Record<string, unknown>;
        assert.equal(String(backed.reasoning_content ?? "").includes(MARKER), sendsState(dialect, stream));
        assert.equal(backed.reasoning_content, asked.providerState?.message?.reasoning_content);
      } finally {
        await provider.close();
        await store.close();
      }
    });
  }
}

/** The dialects whose replies say how many prompt tokens the provider read from its cache. */
const CACHING = dialects.filter((dialect) => dialect.expect.cached.some((n) => n !== null));

Deno.test("the dialects that report cached prompt tokens are OpenAI, DeepSeek, Groq, Moonshot, Qwen and xAI", () => {
  assert.deepEqual(CACHING.map((dialect) => dialect.name), [
    "deepseek",
    "groq",
    "moonshot",
    "openai",
    "qwen",
    "xai",
  ]);
  for (const dialect of CACHING) assert.ok(Math.max(...dialect.expect.cached.map(Number)) > 0, dialect.name);
});

/** Dollars per million tokens in, out and cached, the same for every dialect's model. */
const [IN, OUT, CACHED] = [4, 16, 1];

/** What a dialect's turn costs, from its fixture: cached prompt tokens at CACHED, the rest at IN. */
function costOfTurn(expect: Dialect["expect"]): number {
  const dollars = expect.usage.reduce((total, [prompt, completion], i) => {
    const cached = expect.cached[i] ?? 0;
    return total + ((prompt - cached) * IN + cached * CACHED + completion * OUT) / 1e6;
  }, 0);
  return Math.round(dollars * 1e8) / 1e8;
}

for (const dialect of CACHING) {
  const { expect } = dialect;
  const model = (dialect.replies[0].body as { model: string }).model;
  for (const stream of [true, false]) {
    const mode = stream ? "streamed" : "whole";

    storeTest(
      `serve on $Store counts and prices ${dialect.name}'s ${mode} cached prompt tokens in the trace, the store, /usage and GET /v1/usage`,
      async (db) => {
        const store = await db.open({ now: steppingClock() });
        const provider = replayProvider(dialect.replies);
        try {
          using h = httpHarness();
          h.deps.store = store;
          Object.assign(h.deps.agent, {
            llm: client(provider.url, stream),
            prices: parsePrices(`${model}=${IN}/${OUT}/${CACHED}`),
            now: () => new Date("2026-03-01T12:00:00Z"),
          });
          const response = await h.handler(postMessage("cache", { message: "what is 6*7?" }));
          assert.equal(response.status, 200, await response.clone().text());
          assert.equal((await response.json()).answer, expect.answer);
          const [prompt, completion] = [0, 1].map((i) => expect.usage[0][i] + expect.usage[1][i]);
          const cached = sum(expect.cached);
          const cost = costOfTurn(expect);
          assert.ok(cost < costOfTurn({ ...expect, cached: [null, null] }), "cached tokens cost less");

          const trace = readTrace(h.tracePath);
          assert.deepEqual(
            trace.filter((event) => event.event === "llm_call").map((event) => event.data.cached_tokens),
            expect.cached,
          );
          assert.equal(trace.find((event) => event.event === "run_end")?.data.cost_usd, cost);

          const counted = {
            day: "2026-03-01",
            model,
            promptTokens: prompt,
            cachedTokens: cached,
            cacheWriteTokens: 0,
            completionTokens: completion,
            calls: 2,
            estimatedCalls: 0,
          };
          assert.deepEqual(await store.sessionUsage(keyOf("cache", "local")), [counted]);
          assert.deepEqual(await store.userUsage("local"), [counted]);

          let said = "";
          await runCommand("/usage", {
            state: { sessionId: "cache", userId: "local", lastTurn: null },
            store,
            prices: h.deps.agent.prices,
            write: (text) => (said += text),
            clearScreen: () => {},
            newSessionId: () => "n",
          });
          const n = (count: number) => count.toLocaleString("en-US");
          assert.ok(
            said.includes(
              `(${n(prompt)} prompt, ${n(cached)} of them cached, + ${
                n(completion)
              } completion) over 2 model ` +
                `calls, ${formatCost(cost)}, as stored`,
            ),
            said,
          );

          const page = await (await h.handler(new Request("http://agent.test/v1/usage"))).json();
          assert.deepEqual(page.days, [{
            day: "2026-03-01",
            total_tokens: prompt + completion,
            cached_tokens: cached,
            cache_write_tokens: 0,
            cost_usd: cost,
            models: [{
              model,
              prompt_tokens: prompt,
              cached_tokens: cached,
              cache_write_tokens: 0,
              completion_tokens: completion,
              total_tokens: prompt + completion,
              calls: 2,
              estimated_calls: 0,
              cost_usd: cost,
            }],
          }]);
          assert.equal(page.today.cached_tokens, cached);
          assert.equal(page.today.cost_usd, cost);
        } finally {
          await provider.close();
          await store.close();
        }
      },
    );
  }
}

// ---------------------------------------------------------------------------------------------------------
// The rules behind the dialects, each on its smallest case

function assemble(deltas: Record<string, unknown>[]): ChatReply {
  const assembler = new ReplyAssembler({ model: MODEL });
  for (const delta of deltas) {
    assembler.add({
      event: null,
      data: JSON.stringify({ choices: [{ index: 0, delta, finish_reason: null }] }),
    });
  }
  assembler.add({
    event: null,
    data: JSON.stringify({ choices: [{ index: 0, delta: {}, finish_reason: "stop" }] }),
  });
  return assembler.reply();
}

const calc = (expression: string) => ({ name: "calculator", arguments: JSON.stringify({ expression }) });

Deno.test("ReplyAssembler starts a new call for a new id under an index already used, never joining arguments", () => {
  const reply = assemble([{
    tool_calls: [
      { index: 0, id: "a", type: "function", function: calc("6*7") },
      { index: 0, id: "b", type: "function", function: calc("2+3") },
    ],
  }, {
    tool_calls: [{ index: 0, id: "c", type: "function", function: calc("1+1") }],
  }]);
  assert.deepEqual(reply.toolCalls, [
    { id: "a", ...calc("6*7") },
    { id: "b", ...calc("2+3") },
    { id: "c", ...calc("1+1") },
  ]);
});

Deno.test("ReplyAssembler reads two entries without index or id in one delta as two calls", () => {
  const reply = assemble([{
    tool_calls: [{ id: "", function: calc("6*7") }, { id: "", function: calc("2+3") }],
  }]);
  assert.deepEqual(reply.toolCalls, [{ id: "", ...calc("6*7") }, { id: "", ...calc("2+3") }]);
});

Deno.test("ReplyAssembler continues the last call with an entry without index or id in a later delta", () => {
  const reply = assemble([
    { tool_calls: [{ id: "a", function: { name: "calculator", arguments: '{"expression":' } }] },
    { tool_calls: [{ function: { arguments: '"6*7"}' } }] },
    { tool_calls: [{ id: "b", function: calc("2+3") }] },
  ]);
  assert.deepEqual(reply.toolCalls, [{ id: "a", ...calc("6*7") }, { id: "b", ...calc("2+3") }]);
});

Deno.test("the wire reads content parts: text joined, thinking and unknown parts dropped, anything else invalid", () => {
  const parts = [
    { type: "thinking", thinking: [{ type: "text", text: MARKER }] },
    { type: "text", text: "6*7 " },
    { type: "reference", reference_ids: [1] },
    { type: "text", text: "is 42." },
  ];
  const body = (content: unknown) => ({ choices: [{ message: { role: "assistant", content } }] });
  assert.equal(parseCompletion(body(parts)).content, "6*7 is 42.");
  assert.equal(parseCompletion(body(parts.slice(0, 1))).content, null, "only thinking: no answer text");
  assert.equal(assemble([{ content: parts.slice(0, 2) }, { content: "is 42." }]).content, "6*7 is 42.");
  const invalid: [unknown, RegExp][] = [
    [42, /content is neither a string nor null/],
    [{ type: "text", text: "x" }, /content is neither a string nor null/],
    [["x"], /content\[0\] is string, not a content part/],
    [[{ type: "text", text: 7 }], /content\[0\] is a text part without a string "text"/],
  ];
  for (const [content, message] of invalid) {
    assert.throws(() => parseCompletion(body(content)), (error) => {
      assert.ok(error instanceof LlmError);
      assert.equal(error.kind, "invalid_response");
      assert.match(error.message, message);
      return true;
    });
    assert.throws(() => assemble([{ content }]), { name: "LlmError", message });
  }
});

Deno.test("the wire reads usage at the top level, in choices[0] and in x_groq, streamed and whole", () => {
  const counts = { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 };
  const expected = { promptTokens: 3, completionTokens: 2, totalTokens: 5, cachedTokens: null };
  const choice = { index: 0, message: { content: "ok" }, finish_reason: "stop" };
  assert.deepEqual(parseCompletion({ choices: [{ ...choice, usage: counts }] }).usage, expected);
  assert.deepEqual(parseCompletion({ choices: [choice], x_groq: { usage: counts } }).usage, expected);
  for (
    const chunk of [{ choices: [{ index: 0, delta: {}, finish_reason: "stop", usage: counts }] }, {
      choices: [{ index: 0, delta: {}, finish_reason: "stop" }],
      x_groq: { id: "req_1", usage: counts },
    }]
  ) {
    const assembler = new ReplyAssembler();
    assembler.add({
      event: null,
      data: JSON.stringify({ choices: [{ index: 0, delta: { content: "ok" } }] }),
    });
    assembler.add({ event: null, data: JSON.stringify(chunk) });
    assert.deepEqual(assembler.reply().usage, expected);
  }
});

Deno.test("the wire reads cached prompt tokens in each provider's shape, streamed and whole, null when none is said", () => {
  const cases: [
    what: string,
    usage: Record<string, unknown>,
    prompt: number | null,
    cached: number | null,
  ][] = [
    // OpenAI (this is its guide's example), Groq, xAI, Qwen, Kimi K2: a part of the prompt, in its details.
    [
      "prompt_tokens_details",
      {
        prompt_tokens: 2006,
        completion_tokens: 300,
        total_tokens: 2306,
        prompt_tokens_details: { cached_tokens: 1920, audio_tokens: 0 },
      },
      2006,
      1920,
    ],
    // Moonshot's own context cache counts at the top level.
    [
      "a top-level cached_tokens",
      { prompt_tokens: 600, completion_tokens: 25, total_tokens: 625, cached_tokens: 512 },
      600,
      512,
    ],
    // DeepSeek's disk cache: hits and misses, whose sum is the prompt when prompt_tokens is absent.
    [
      "prompt_cache_hit_tokens",
      {
        completion_tokens: 40,
        total_tokens: 392,
        prompt_cache_hit_tokens: 320,
        prompt_cache_miss_tokens: 32,
      },
      352,
      320,
    ],
    [
      "prompt_cache_hit_tokens beside prompt_tokens",
      {
        prompt_tokens: 352,
        completion_tokens: 40,
        total_tokens: 392,
        prompt_cache_hit_tokens: 320,
        prompt_cache_miss_tokens: 32,
      },
      352,
      320,
    ],
    ["no details", { prompt_tokens: 250, completion_tokens: 90, total_tokens: 340 }, 250, null],
    [
      "null details (vLLM)",
      { prompt_tokens: 250, completion_tokens: 90, prompt_tokens_details: null },
      250,
      null,
    ],
    [
      "a count that is not a number",
      { prompt_tokens: 5, prompt_tokens_details: { cached_tokens: "4" } },
      5,
      null,
    ],
    ["a hit without its miss", { prompt_cache_hit_tokens: 320 }, null, 320],
  ];
  const choice = { index: 0, message: { content: "ok" }, finish_reason: "stop" };
  for (const [what, usage, prompt, cached] of cases) {
    const streamed = [{ choices: [], usage }, {
      choices: [{ index: 0, delta: {}, finish_reason: "stop" }],
      x_groq: { id: "req_1", usage },
    }].map((chunk) => {
      const assembler = new ReplyAssembler();
      assembler.add({
        event: null,
        data: JSON.stringify({ choices: [{ index: 0, delta: { content: "ok" } }] }),
      });
      assembler.add({ event: null, data: JSON.stringify(chunk) });
      return assembler.reply();
    });
    for (const reply of [parseCompletion({ choices: [choice], usage }), ...streamed]) {
      assert.deepEqual([reply.usage?.promptTokens, reply.usage?.cachedTokens], [prompt, cached], what);
    }
  }
});
