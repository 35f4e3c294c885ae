import assert from "node:assert/strict";
import { mergeSummary, parseSummaryPatch } from "../src/memory/summary.ts";
import { estimateRequestTokens, planCompaction } from "../src/memory/plan.ts";
import { parseSummary, RUNTIME_CONTEXT_HEADER } from "../src/memory/summary.ts";
import { SYSTEM_PROMPT } from "../src/agent/context.ts";
import { LlmError } from "../src/errors.ts";
import { ScriptedLLM } from "../src/llm/scripted.ts";
import { runTurn } from "../src/agent/loop.ts";
import {
  createLlmSummarizer,
  deterministicSummarizer,
  type Summarizer,
  SUMMARY_PROMPT,
  summaryAsk,
} from "../src/memory/summarizer.ts";
import type { Message } from "../src/types.ts";
import { harness, keyOf } from "./_harness.ts";

const input = (message: string) => ({ sessionId: "c1", userId: "u", message });
const answer = (text: string) => ({ content: text });
const NOW = new Date("2026-02-03T04:05:06.000Z");

Deno.test("runTurn() writes no summary on ordinary turns below both thresholds", async () => {
  using h = harness([answer("a"), answer("b"), answer("c")], { maxRawTurns: 3 });
  for (const m of ["one", "two", "three"]) await runTurn(input(m), h.agent, h.run);
  assert.equal((await h.store.get(keyOf("c1")))!.summary, null);
  assert.ok(!h.events.some((e) => e.event === "compact"));
  assert.equal((await h.store.messages(keyOf("c1"))).length, 6);
});

Deno.test("runTurn() compacts on the turn trigger, keeps the last turns raw and sends the summary block", async () => {
  const answers = ["a1", "a2", "a3", "a4", "a5"].map(answer);
  using h = harness(answers, { maxRawTurns: 2, compactBatch: 0 });
  const turn = async (message: string) => {
    await runTurn(input(message), h.agent, h.run);
    await h.agent.compactions.idle();
  };
  await turn("My favourite colour is teal.");
  await turn("I want to learn Deno");
  assert.ok(!h.events.some((e) => e.event === "compact"), "two turns are within the limit");
  await turn("third");
  const compact = h.events.find((e) => e.event === "compact")!;
  assert.equal(compact.turn, 3, "the compaction belongs to the run that went over the limit");
  assert.equal(compact.data.background, true);
  assert.ok(
    h.events.findIndex((e) => e === compact) >
      h.events.findIndex((e) => e.event === "run_end" && e.turn === 3),
  );
  assert.equal(compact.data.ok, true);
  assert.equal(compact.data.trigger, "turns");
  assert.equal(compact.data.messages_removed, 2);
  assert.equal(compact.data.turns_removed, 1);
  assert.deepEqual(compact.data.summary_items, { goals: 0, facts: 1, todos: 0, unresolved: 0 });
  // Exactly the first turn went; the session's accounting still adds up.
  assert.deepEqual((await h.store.messages(keyOf("c1"))).map((m) => m.content), [
    "I want to learn Deno",
    "a2",
    "third",
    "a3",
  ]);
  const session = (await h.store.get(keyOf("c1")))!;
  assert.equal(session.turnCount, 3);
  assert.equal(session.compactedTurns, 1);
  assert.deepEqual(parseSummary(session.summary)!.facts, ["User said: My favourite colour is teal."]);

  await turn("fourth");
  await turn("fifth");
  const requests = h.llm.requests.map((r) => r.messages);
  assert.ok(requests.every((r) => r[0].content === SYSTEM_PROMPT), "the first message never changes");
  assert.equal(
    requests[2][1].content,
    "My favourite colour is teal.",
    "no block before the first compaction, which follows turn 3's answer",
  );
  const blocks = requests.slice(3).map((r) => r[1]);
  assert.ok(blocks.every((m) => m.role === "system" && m.content!.startsWith(`${RUNTIME_CONTEXT_HEADER}\n`)));
  assert.match(blocks[0].content!, /favourite colour is teal/);
  // The turn-4 compaction changed the block; it is never stored as a message.
  assert.notEqual(blocks[0].content, blocks[1].content);
  assert.ok(!(await h.store.messages(keyOf("c1"))).some((m) => m.content?.includes(RUNTIME_CONTEXT_HEADER)));
  assert.deepEqual(parseSummary((await h.store.get(keyOf("c1")))!.summary)!.goals, ["I want to learn Deno"]);
});

Deno.test("runTurn() compacts on the token trigger and ends within the budget", async () => {
  const long = (n: number) => `turn ${n} ` + "lorem ipsum ".repeat(150);
  using h = harness(Array.from({ length: 6 }, (_, i) => answer(`ok ${i}`)), { maxCtxTokens: 1500 });
  for (let i = 0; i < 6; i++) await runTurn(input(long(i)), h.agent, h.run);
  const compacts = h.events.filter((e) => e.event === "compact");
  assert.ok(compacts.length > 0);
  assert.ok(compacts.every((e) => e.data.ok === true && e.data.trigger === "tokens"));
  for (const e of compacts) assert.ok((e.data.tokens_after as number) <= 1500, JSON.stringify(e.data));
  const last = h.llm.requests.at(-1)!.messages;
  assert.equal(last.at(-1)!.content, long(5), "the current message is always kept");
  const sent = h.llm.requests.at(-1)!;
  const tokens = estimateRequestTokens(sent.messages, sent.tools);
  assert.ok(tokens <= 1500 * 1.1, `request of ~${tokens} tokens`);
});

Deno.test("runTurn() sends an over-budget current turn anyway and says so in the trace", async () => {
  using h = harness([answer("fine")], { maxCtxTokens: 300 });
  const result = await runTurn(input("x".repeat(4000)), h.agent, h.run);
  assert.equal(result.outcome, "answered");
  const compact = h.events.filter((e) => e.event === "compact");
  assert.equal(compact.length, 1);
  assert.equal(compact[0].data.ok, false);
  assert.equal(compact[0].data.over_budget, true);
  assert.match(String(compact[0].data.reason), /current turn alone is over the token budget/);
});

const failing: [string, Summarizer, RegExp][] = [
  [
    "invalid JSON",
    () => Promise.resolve({ text: "Sure! Here is the summary.", usage: null }),
    /not valid JSON/,
  ],
  [
    "a schema violation",
    () => Promise.resolve({ text: '{"facts": ["ok"], "mood": ["happy"]}', usage: null }),
    /unknown key "mood"/,
  ],
  [
    "an LLM error",
    createLlmSummarizer(
      new ScriptedLLM([new LlmError("LLM request failed: HTTP 500 from x", { kind: "http" })]),
    ),
    /HTTP 500/,
  ],
  [
    "a timeout",
    () => Promise.reject(new LlmError("LLM request timed out after 60 s", { kind: "timeout" })),
    /timed out/,
  ],
];

for (const [what, summarizer, reason] of failing) {
  Deno.test(`runTurn() abandons a compaction on ${what}: summary and messages stay, the turn goes on`, async () => {
    using h = harness([answer("a"), answer("b"), answer("c")], {
      maxRawTurns: 1,
      compactBatch: 0,
      summarizer,
    });
    await runTurn(input("first"), h.agent, h.run);
    const result = await runTurn(input("second"), h.agent, h.run);
    await h.agent.compactions.idle();
    assert.equal(result.outcome, "answered");
    assert.equal(result.answer, "b");
    const compact = h.events.filter((e) => e.event === "compact");
    assert.equal(compact.length, 1, "not retried within the turn");
    assert.equal(compact[0].data.ok, false);
    assert.match(String(compact[0].data.reason), reason);
    assert.equal((await h.store.get(keyOf("c1")))!.summary, null);
    assert.deepEqual((await h.store.messages(keyOf("c1"))).map((m) => m.content), [
      "first",
      "a",
      "second",
      "b",
    ]);
  });
}

Deno.test("runTurn() keeps an old fact the summarizer omits until newer ones push it out", async () => {
  const replies = [
    '{"facts": ["the user is Ada"]}',
    '{"facts": ["f1", "f2"]}',
    '{"facts": ["f3", "F1 ", "f4"]}',
  ];
  let call = 0;
  const summarizer: Summarizer = () => Promise.resolve({ text: replies[call++], usage: null });
  const answers = Array.from({ length: 4 }, (_, i) => answer(`a${i}`));
  using h = harness(answers, { maxRawTurns: 1, compactBatch: 0, summarizer });
  for (const m of ["m1", "m2", "m3", "m4"]) {
    await runTurn(input(m), h.agent, h.run);
    await h.agent.compactions.idle();
  }
  assert.deepEqual(parseSummary((await h.store.get(keyOf("c1")))!.summary)!.facts, [
    "f3",
    "F1",
    "f4",
    "f2",
    "the user is Ada",
  ]);
});

Deno.test("createLlmSummarizer() sends the session's own request, its tools not callable, then asks at the end", async () => {
  const llm = new ScriptedLLM([{ content: '{"goals": ["ship"]}' }]);
  const previous = { goals: ["old goal"], facts: [], todos: [], unresolved: [], updated_at: "t" };
  const system: Message[] = [{ role: "system", content: "the system prompt" }];
  const messages: Message[] = [
    { role: "user", content: "compute 2+2" },
    {
      role: "assistant",
      content: null,
      toolCalls: [{ id: "c", name: "calculator", arguments: '{"expression":"2+2"}' }],
    },
    { role: "tool", content: '{"ok":true,"data":{"result":4}}', toolCallId: "c" },
    { role: "assistant", content: "4" },
  ];
  const kept: Message[] = [{ role: "user", content: "and now 3+3, please" }, {
    role: "assistant",
    content: "6",
  }];
  const tools = [{ name: "calculator", description: "d", parameters: { type: "object" } }];
  const session = { system, kept, tools, cacheKey: "u/s" };
  const reply = await createLlmSummarizer(llm)({ previous, messages, session });
  assert.equal(reply.text, '{"goals": ["ship"]}');
  const [request] = llm.requests;
  assert.deepEqual(request.tools, tools, "the same tools as the session's requests: the cached prefix");
  assert.equal(request.toolChoice, "none");
  assert.deepEqual(request.messages.slice(0, -1), [...system, ...messages, ...kept]);
  const ask = request.messages.at(-1)!;
  assert.equal(ask.role, "user");
  assert.ok(ask.content!.startsWith(SUMMARY_PROMPT));
  assert.match(
    ask.content!,
    /Previous memory:\n\{"goals":\["old goal"\],"facts":\[\],"todos":\[\],"unresolved":\[\]\}/,
  );
  assert.match(
    ask.content!,
    /the first 4 messages of the conversation above \(1 user turns\): everything before the user message that begins "and now 3\+3, please"\.$/,
  );
});

Deno.test("summaryAsk() says every message goes when none is kept, and quotes a long kept message short", () => {
  const removed: Message[] = [{ role: "user", content: "a" }, { role: "assistant", content: "b" }];
  assert.match(
    summaryAsk(null, removed, []),
    /Previous memory:\n\{\}\n\nMessages being removed: all the messages of the conversation above \(1 user turns\)\.$/,
  );
  const long = summaryAsk(null, removed, [{ role: "user", content: "x".repeat(500) }]);
  assert.ok(long.length < SUMMARY_PROMPT.length + 300, "the kept message is quoted, not copied");
});

Deno.test("deterministicSummarizer() turns statements, goals, todos, results and open questions into JSON", async () => {
  const { text } = await deterministicSummarizer({
    previous: null,
    messages: [
      { role: "user", content: "My name is Ada." },
      { role: "user", content: "I want to ship v1" },
      { role: "user", content: "add a todo" },
      {
        role: "assistant",
        content: null,
        toolCalls: [{ id: "t", name: "todo", arguments: '{"action":"add","text":"write docs"}' }],
      },
      { role: "tool", content: '{"ok":true,"data":{}}', toolCallId: "t" },
      { role: "user", content: "What is 6*7?" },
    ],
  });
  assert.deepEqual(parseSummaryPatch(text), {
    goals: ["I want to ship v1"],
    facts: ["User said: add a todo", "User said: My name is Ada."],
    todos: ["write docs"],
    unresolved: ["What is 6*7?"],
  });
});

Deno.test("parseSummaryPatch() rejects non-strings and over-long items, accepts a fenced reply", () => {
  assert.throws(() => parseSummaryPatch('{"facts": [1]}'), /facts\[0\] must be a string, got number/);
  assert.throws(() => parseSummaryPatch(`{"todos": ["${"x".repeat(201)}"]}`), /todos\[0\] is 201 characters/);
  assert.throws(() => parseSummaryPatch('{"goals": "x"}'), /"goals" must be an array/);
  assert.throws(() => parseSummaryPatch("[]"), /expected a JSON object/);
  assert.throws(() => parseSummaryPatch("{"), SyntaxError);
  assert.deepEqual(parseSummaryPatch('```json\n{"facts": ["  a   b "]}\n```').facts, ["a b"]);
});

Deno.test("mergeSummary() puts new items first, removes duplicates ignoring case and spacing, caps at 5", () => {
  const old = { goals: [], facts: ["Old A", "old b"], todos: ["t"], unresolved: [], updated_at: "x" };
  const merged = mergeSummary(old, {
    goals: ["g"],
    facts: ["new", "OLD  a", "n2", "n3", "n4"],
    todos: [],
    unresolved: [],
  }, NOW);
  assert.deepEqual(merged.facts, ["new", "OLD  a", "n2", "n3", "n4"]);
  assert.deepEqual(merged.todos, ["t"]);
  assert.deepEqual(merged.goals, ["g"]);
  assert.equal(merged.updated_at, "2026-02-03T04:05:06.000Z");
});

Deno.test("planCompaction() never cuts on a nudge, a tool or an assistant message", () => {
  const messages: Message[] = [
    { role: "user", content: "u1" },
    { role: "runtime", content: "[runtime] nudge" },
    { role: "assistant", content: null, toolCalls: [{ id: "a", name: "x", arguments: "{}" }] },
    { role: "tool", content: "{}", toolCallId: "a" },
    { role: "assistant", content: "done" },
    { role: "user", content: "u2" },
    { role: "user", content: "u3" },
  ];
  const plan = planCompaction(messages, { maxRawTurns: 2, maxCtxTokens: 10_000 })!;
  assert.equal(plan.cutIndex, 5);
  assert.equal(planCompaction(messages, { maxRawTurns: 3, maxCtxTokens: 10_000 }), null);
});

Deno.test("parseSummaryPatch() accepts an upper-case JSON fence and turns C0 and C1 control characters into spaces", () => {
  assert.deepEqual(parseSummaryPatch('```JSON\n{"facts": ["a\\u0085b\\u001bc"]}\n```').facts, ["a b c"]);
});

Deno.test("planCompaction() over budget with only the current turn, by a summary larger than the reserve, says so", () => {
  const messages: Message[] = [{ role: "user", content: "hi" }, { role: "assistant", content: "hello" }];
  const options = { maxRawTurns: 1, maxCtxTokens: 200, fixedTokens: 100 };
  // The turn (12) fits beside the fixed parts (100) and the reserve (50); with a stored summary of 95 the
  // request (207) does not, and nothing can be cut to trim that summary.
  assert.equal(planCompaction(messages, { ...options, currentSummaryTokens: 40 }), null, "within budget");
  const plan = planCompaction(messages, { ...options, currentSummaryTokens: 95 });
  assert.deepEqual(plan && { cutIndex: plan.cutIndex, overBudget: plan.overBudget }, {
    cutIndex: 0,
    overBudget: true,
  });
});
