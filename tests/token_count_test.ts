/**
 * Token counts: the per-script estimate against counts taken with o200k_base (written here, so no tokenizer is
 * needed to run the tests), and the calibration with the provider's reported prompt tokens: kept with the
 * session, so a restart or another process estimates the next request from it.
 */
import assert from "node:assert/strict";
import { fc } from "./_fast_check.ts";
import { runTurn } from "../src/agent/loop.ts";
import { estimateRequestTokens, estimateTokens, IMAGE_TOKENS, useTokenizer } from "../src/memory/plan.ts";
import { loadTokenizer } from "../src/memory/tokenizer.ts";
import type { ScriptedRequest } from "../src/llm/scripted.ts";
import type { Message } from "../src/types.ts";
import { SqliteStore } from "../src/store/sqlite.ts";
import { harness, keyOf, tempDir } from "./_harness.ts";

/** Texts of each script class with their o200k_base counts (js-tiktoken 1.0.21). */
const COUNTED: { name: string; text: string; tokens: number }[] = [
  {
    name: "English",
    text:
      "The runtime stores every message of a session, compacts old turns into a structured summary, and " +
      "writes an append-only trace of each run so that every decision can be audited later.",
    tokens: 36,
  },
  {
    name: "Chinese",
    text: "代理循环每轮追加用户消息，最多执行固定的步数；模型请求工具时按顺序执行工具并追加工具消息。" +
      "空回复只提醒一次，然后给出固定的结束回答。",
    tokens: 42,
  },
  {
    name: "JSON",
    text: '{"ok":true,"data":{"todos":[{"id":1,"text":"buy milk","completed":false,' +
      '"createdAt":"2026-01-01T00:00:00.010Z","completedAt":null},{"id":2,"text":"water the plants",' +
      '"completed":true,"createdAt":"2026-01-02T10:20:30.000Z","completedAt":"2026-01-03T08:00:00.000Z"}]},' +
      '"error":null,"truncated":false}',
    tokens: 110,
  },
  {
    name: "code",
    text: "export function uniqueCallIds(calls: readonly ToolCall[], prefix: string): ToolCall[] {\n" +
      "  const seen = new Set<string>();\n  return calls.map((call, i) => {\n" +
      '    const id = call.id === "" || seen.has(call.id) ? `call_${prefix}_${i}` : call.id;\n' +
      "    seen.add(id);\n    return id === call.id ? call : { ...call, id };\n  });\n}",
    tokens: 88,
  },
];

Deno.test("estimateTokens() is within 15% of o200k_base on English, Chinese, JSON and code", () => {
  for (const { name, text, tokens } of COUNTED) {
    const estimate = estimateTokens(text);
    const error = Math.abs(estimate - tokens) / tokens;
    assert.ok(error <= 0.15, `${name}: ${estimate} for ${tokens} (${(error * 100).toFixed(1)}%)`);
    // Where characters / 4 was off by half (Chinese) or a third (JSON).
    if (name === "Chinese" || name === "JSON") {
      assert.ok(Math.abs(Math.ceil(text.length / 4) - tokens) / tokens > 0.25, name);
    }
  }
  assert.equal(estimateTokens(""), 0);
  assert.equal(estimateTokens("123456789"), 3, "digits in threes");
});

/** estimateTokens() as it was first written, by a regular expression: the one pass must count exactly so. */
const SCRIPT_RUNS =
  /([A-Za-z]+)|([0-9]+)|([\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff])|(\s+)|([^\sA-Za-z0-9\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff]+)/gu;

function regexEstimate(text: string): number {
  let tokens = 0;
  for (const [, word, digits, cjk, space, other] of text.matchAll(SCRIPT_RUNS)) {
    if (word !== undefined) tokens += 1.05 + 0.3 * Math.max(0, word.length - 6);
    else if (digits !== undefined) tokens += Math.ceil(digits.length / 3);
    else if (cjk !== undefined) tokens += 0.7;
    else if (space !== undefined) tokens += space.includes("\n") || space.length > 1 ? 1 : 0;
    else if (other !== undefined) {
      tokens += 0.2;
      for (const char of other) tokens += char.charCodeAt(0) < 128 ? 0.3 : 0.5;
    }
  }
  return Math.ceil(tokens);
}

Deno.test("estimateTokens() counts any text exactly as the per-script regular expression does", () => {
  for (const { text } of COUNTED) assert.equal(estimateTokens(text), regexEstimate(text));
  const odd = [
    "\ud800",
    "a\udc00b",
    "😀\ud83d",
    " \n",
    "\u3000\u00a0\ufeff\u2028x",
    "ab12\u4e00\u4e01 \t\n!?",
  ];
  for (const text of odd) assert.equal(estimateTokens(text), regexEstimate(text), JSON.stringify(text));
  const unit = fc.oneof(
    fc.constantFrom(
      " ",
      "\n",
      "\t",
      "\u00a0",
      "\u3000",
      "\ufeff",
      "\u2029",
      "\u0085",
      "\ud800",
      "\udfff",
      "é",
      "中",
      "한",
      "ア",
    ),
    fc.constantFrom(...'aZ09_-{}":,.'),
    fc.string({ unit: "binary", minLength: 1, maxLength: 1 }),
  );
  fc.assert(
    fc.property(fc.string({ unit, maxLength: 60 }), (text) => {
      assert.equal(estimateTokens(text), regexEstimate(text));
    }),
    { numRuns: 2000 },
  );
});

Deno.test("estimateRequestTokens() counts each image of a user message as IMAGE_TOKENS, never its base64, and another role's images not at all", () => {
  // 30 kB of base64: as text it would be thousands of tokens.
  const data = "iVBORw0KGgo".padEnd(30_000, "AbCd");
  const image = { mediaType: "image/png", data } as const;
  const text: Message = { role: "user", content: "what is in these?" };
  const plain = estimateRequestTokens([text]);
  assert.equal(IMAGE_TOKENS, 1600);
  assert.equal(estimateRequestTokens([{ ...text, images: [image, image] }]), plain + 2 * IMAGE_TOKENS);
  assert.equal(estimateRequestTokens([{ ...text, images: [] }]), plain);
  const assistant: Message = { role: "assistant", content: "what is in these?" };
  assert.equal(
    estimateRequestTokens([{ ...assistant, images: [image] }]),
    estimateRequestTokens([assistant]),
  );
});

Deno.test("the provider's prompt count is kept with the session and budgets the next request, after a restart too", async () => {
  using dir = tempDir();
  const path = `${dir.path}/s.db`;
  const key = keyOf("s");
  // The provider counts far more than the estimate: 5,000 tokens for a short request.
  const counted = { promptTokens: 5000, completionTokens: 5, totalTokens: 5005, cachedTokens: null };
  {
    const store = new SqliteStore(path);
    using h = harness([{ content: "first", usage: counted }], { store, maxCtxTokens: 4000 });
    await runTurn({ ...key, message: "hello" }, h.agent, h.run);
    const stored = (await store.get(key))!.calibration!;
    assert.equal(stored.tokens, 5000);
    assert.equal(stored.through, (await store.messages(key))[0].id, "the request ended at the question");
    await store.close();
  }
  // A new process: its first request is estimated from the stored count, over the budget, so it compacts
  // first (the estimate alone, a few hundred tokens, would not).
  const store = new SqliteStore(path);
  try {
    using h = harness([{ content: "second" }], { store, maxCtxTokens: 4000 });
    const result = await runTurn({ ...key, message: "again" }, h.agent, h.run);
    assert.equal(result.outcome, "answered");
    const compact = h.events.find((e) => e.event === "compact");
    assert.ok(compact !== undefined, "compacted by the provider's count");
    assert.equal(compact.data.trigger, "tokens");
    assert.ok((compact.data.tokens_before as number) > 5000, JSON.stringify(compact.data));
  } finally {
    await store.close();
  }
});

Deno.test("a calibration counted with other fixed parts is not used: the estimate stands", async () => {
  using dir = tempDir();
  const store = new SqliteStore(`${dir.path}/s.db`);
  try {
    const key = keyOf("s");
    const counted = { promptTokens: 5000, completionTokens: 5, totalTokens: 5005, cachedTokens: null };
    using h = harness([{ content: "first", usage: counted }, { content: "second" }], {
      store,
      maxCtxTokens: 4000,
    });
    await runTurn({ ...key, message: "hello", instructions: "Answer in French." }, h.agent, h.run);
    // Without the client's instructions the request differs: the count does not describe it.
    const result = await runTurn({ ...key, message: "again" }, h.agent, h.run);
    assert.equal(result.outcome, "answered");
    assert.equal(h.events.filter((e) => e.event === "compact").length, 0);
  } finally {
    await store.close();
  }
});

Deno.test("loadTokenizer() counts as the encoding does: o200k_base gives the counts above, cl100k_base others", async () => {
  const o200k = await loadTokenizer("o200k_base");
  const cl100k = await loadTokenizer("cl100k_base");
  for (const { name, text, tokens } of COUNTED) assert.equal(o200k.count(text), tokens, name);
  const chinese = COUNTED.find((c) => c.name === "Chinese")!.text;
  assert.notEqual(cl100k.count(chinese), o200k.count(chinese), "another encoding, another count");
  assert.equal(o200k.count("<|endoftext|>"), 7, "a special token in a message is counted as its text");
});

/** A request's tokens counted with `count` as OpenAI does: 3 around each message's text, and the tools' JSON. */
function exactly(request: ScriptedRequest, count: (text: string) => number): number {
  let tokens = request.tools.length === 0 ? 0 : count(JSON.stringify(request.tools));
  for (const m of request.messages) {
    const calls = (m.toolCalls ?? []).map((c) => ` ${c.id} ${c.name} ${c.arguments}`).join("");
    tokens += 3 + count((m.content ?? "") + (m.toolCallId ?? "") + calls);
  }
  return tokens;
}

Deno.test("with AGENT_TOKENIZER a turn's budget counts its request exactly, not by the estimate", async () => {
  const tokenizer = await loadTokenizer("o200k_base");
  const question = COUNTED.map((c) => c.text).join("\n\n");
  let request: ScriptedRequest;
  {
    using h = harness([{ content: "ok", usage: null }]);
    await runTurn({ ...keyOf("s"), message: question }, h.agent, h.run);
    request = h.llm.requests[0];
  }
  const exact = exactly(request, tokenizer.count);
  assert.notEqual(estimateRequestTokens(request.messages, request.tools), exact, "the estimate differs");
  useTokenizer(tokenizer);
  try {
    assert.equal(estimateRequestTokens(request.messages, request.tools), exact);
    for (const [budget, outcome, calls] of [[exact - 1, "budget", 0], [exact + 1, "answered", 1]] as const) {
      using h = harness([{ content: "ok", usage: null }]);
      h.agent.maxTurnTokens = budget;
      const result = await runTurn({ ...keyOf("s"), message: question }, h.agent, h.run);
      assert.equal(result.outcome, outcome, `budget ${budget} for ${exact}`);
      assert.equal(h.llm.requests.length, calls);
    }
  } finally {
    useTokenizer(null);
  }
  assert.notEqual(estimateRequestTokens(request.messages, request.tools), exact, "the estimate again");
});
