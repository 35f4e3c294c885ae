/**
 * Property-based tests of compaction over random, well-formed sessions: the pure planner, the summary
 * schema and merge, and `compactIfDue()` end to end on an in-memory SqliteStore.
 */
import { fc } from "./_fast_check.ts";
import assert from "node:assert/strict";
import {
  estimateMessageTokens,
  estimateRequestTokens,
  planCompaction,
  type PlanOptions,
  summaryReserve,
} from "../src/memory/plan.ts";
import {
  fitSummary,
  MAX_SUMMARY_ITEM_CHARS,
  mergeSummary,
  parseSummaryPatch,
  SUMMARY_FIELDS,
  type SummaryPatch,
} from "../src/memory/summary.ts";
import { MAX_SUMMARY_ITEMS } from "../src/memory/summary.ts";
import { buildContext, SYSTEM_PROMPT } from "../src/agent/context.ts";
import { parseSummary, runtimeContextText, type Summary } from "../src/memory/summary.ts";
import { EMPTY_ANSWER, EMPTY_REPLY_NUDGE, MAX_STEPS_ANSWER } from "../src/agent/loop.ts";
import { compactIfDue, type CompactionResult, type MemoryState, summaryRoom } from "../src/memory/compact.ts";
import { SqliteStore } from "../src/store/sqlite.ts";
import { deterministicSummarizer, type Summarizer } from "../src/memory/summarizer.ts";
import { calculatorTool } from "../src/tools/calculator.ts";
import { serializeToolResult } from "../src/tools/registry.ts";
import type { Message, StoredMessage, ToolSchema } from "../src/types.ts";
import { keyOf, steppingClock } from "./_harness.ts";

const RUNS = 200;
const NOW = new Date("2026-02-03T04:05:06.000Z");

// ---------------------------------------------------------------------------------------------------------
// Arbitraries: texts, tool calls, turns, sessions.

/** Units of random texts: ASCII, whitespace, quotes and escapes, CJK, accents, case traps, an emoji. */
const UNIT = fc.constantFrom(
  ..."aexQ7 ?{}`'\"\\".split(""),
  "  ",
  "\n",
  "\t",
  "你",
  "好",
  "世界",
  "？",
  "。",
  "é",
  "ß",
  "İ",
  "😀",
  "\u3000",
  "\r",
  "\u0007",
  "\u001b[A",
);
const PHRASES = fc.constantFrom(
  "",
  "I want to learn Deno",
  "What is 6*7?",
  "My name is Ada.",
  "help me plan a trip",
  "记住：我住在北京",
  "你好吗？",
  "she said \"hi\" and 'bye'",
);

/** A text of 0 to about `maxLength` characters, a few control characters included. */
function text(maxLength = 300): fc.Arbitrary<string> {
  return fc.oneof(
    { weight: 3, arbitrary: fc.string({ unit: UNIT, maxLength, size: "medium" }) },
    { weight: 2, arbitrary: fc.string({ unit: "grapheme", maxLength, size: "medium" }) },
    { weight: 1, arbitrary: PHRASES },
  );
}

interface CallSpec {
  name: string;
  args: string;
  result: string;
}

function ok(data: unknown): string {
  return serializeToolResult({ ok: true, data, error: null, truncated: false });
}

const CALL: fc.Arbitrary<CallSpec> = fc.oneof(
  fc.constantFrom(
    { expression: "1+2", result: 3 },
    { expression: "6*7", result: 42 },
    { expression: "2**10", result: 1024 },
    { expression: "-7 % 3", result: 2 },
  ).map(({ expression, result }) => ({
    name: "calculator",
    args: JSON.stringify({ expression }),
    result: ok({ expression, result }),
  })),
  text(120).map((t) => ({
    name: "todo",
    args: JSON.stringify({ action: "add", text: t }),
    result: ok({ id: 1, text: t, completed: false }),
  })),
  fc.tuple(text(60), text(300)).map(([query, found]) => ({
    name: "search_mock",
    args: JSON.stringify({ query }),
    result: found,
  })),
);

interface TurnSpec {
  user: string;
  rounds: { content: string | null; calls: CallSpec[] }[];
  nudge: boolean;
  answer: string | null;
}

const TURN: fc.Arbitrary<TurnSpec> = fc.record({
  user: text(),
  rounds: fc.array(
    fc.record({
      content: fc.option(text(80), { nil: null }),
      calls: fc.array(CALL, { minLength: 1, maxLength: 4 }),
    }),
    { maxLength: 3 },
  ),
  nudge: fc.boolean(),
  answer: fc.option(fc.oneof(fc.constantFrom(EMPTY_ANSWER, MAX_STEPS_ANSWER), text()), {
    nil: null,
    freq: 3,
  }),
});

/**
 * A turn as the loop saves it, in groups that land together: the user message, each tool round (the
 * assistant's calls and one result per call, in order), the nudge, the answer. Call ids are unique per session.
 */
function turnGroups(turn: TurnSpec, t: number): Message[][] {
  const groups: Message[][] = [[{ role: "user", content: turn.user }]];
  turn.rounds.forEach((round, r) => {
    const calls = round.calls.map((c, i) => ({ id: `call_${t}_${r}_${i}`, name: c.name, arguments: c.args }));
    groups.push([
      { role: "assistant", content: round.content, toolCalls: calls },
      ...calls.map((call, i): Message => ({
        role: "tool",
        content: round.calls[i].result,
        toolCallId: call.id,
      })),
    ]);
  });
  if (turn.nudge) groups.push([{ role: "runtime", content: EMPTY_REPLY_NUDGE }]);
  if (turn.answer !== null) groups.push([{ role: "assistant", content: turn.answer }]);
  return groups;
}

function sessionOf(turns: readonly TurnSpec[]): Message[] {
  return turns.flatMap((turn, t) => turnGroups(turn, t).flat());
}

const TURNS = fc.array(TURN, { minLength: 1, maxLength: 40, size: "medium" });
/** A well-formed session: the last turn is the current one and may end right after its user message. */
const SESSION: fc.Arbitrary<Message[]> = TURNS.map(sessionOf);

interface PlanCase {
  messages: Message[];
  maxRawTurns: number;
  maxCtxTokens: number;
  fixedTokens: number;
  currentSummaryTokens: number;
}

const PLAN_CASE: fc.Arbitrary<PlanCase> = fc.record({
  messages: SESSION,
  maxRawTurns: fc.integer({ min: 1, max: 30 }),
  maxCtxTokens: fc.integer({ min: 200, max: 8000 }),
  fixedTokens: fc.integer({ min: 0, max: 300 }),
  currentSummaryTokens: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 1200 })),
});

/** The planner's inputs restated: turn starts, suffix token sums and the post-compaction budget test. */
function analyse(c: PlanCase) {
  const starts = c.messages.flatMap((m, i) => (m.role === "user" ? [i] : []));
  const tail = new Array<number>(c.messages.length + 1).fill(0);
  for (let i = c.messages.length - 1; i >= 0; i--) {
    tail[i] = tail[i + 1] + estimateMessageTokens(c.messages[i]);
  }
  const reserve = summaryReserve(c.maxCtxTokens);
  const tokensBefore = c.fixedTokens + c.currentSummaryTokens + tail[0];
  const overTurns = starts.length > c.maxRawTurns;
  const overTokens = tokensBefore > c.maxCtxTokens;
  /** Whether keeping turns `turn..` fits beside the fixed parts and the largest summary. */
  const fits = (turn: number) => c.fixedTokens + reserve + tail[starts[turn]] <= c.maxCtxTokens;
  return { starts, tail, reserve, tokensBefore, overTurns, overTokens, fits };
}

function users(messages: readonly Message[]): number {
  return messages.filter((m) => m.role === "user").length;
}

function show(c: PlanCase): string {
  const { messages, ...options } = c;
  return `${JSON.stringify(options)} roles=${messages.map((m) => m.role[0]).join("")}`;
}

// ---------------------------------------------------------------------------------------------------------
// planCompaction()

Deno.test("planCompaction() returns null exactly when no threshold is exceeded", () => {
  fc.assert(
    fc.property(PLAN_CASE, (c) => {
      const a = analyse(c);
      const plan = planCompaction(c.messages, c);
      // JSDoc: null "when neither threshold is exceeded". A lone current turn over the token budget, by itself
      // or by a current summary larger than the reserve that no cut can trim, gets an overBudget plan at 0.
      const expectNull = !a.overTurns && !a.overTokens;
      assert.equal(plan === null, expectNull, show(c));
      if (plan !== null && plan.cutIndex === 0) {
        assert.ok(plan.overBudget, "a plan that cuts nothing is only returned to say it is over budget");
        assert.equal(a.starts.length, 1, "and only when the current turn is the only one");
      }
    }),
    { numRuns: RUNS },
  );
});

Deno.test("planCompaction() cuts only at a real user message, keeps the current one and never orphans a tool call", () => {
  fc.assert(
    fc.property(PLAN_CASE, (c) => {
      const plan = planCompaction(c.messages, c);
      if (plan === null || plan.cutIndex === 0) return;
      const { cutIndex } = plan;
      assert.ok(cutIndex > 0 && cutIndex < c.messages.length);
      assert.equal(c.messages[cutIndex].role, "user", show(c));
      assert.ok(c.messages.findLastIndex((m) => m.role === "user") >= cutIndex, "the current turn is kept");
      const kept = c.messages.slice(cutIndex);
      const cut = c.messages.slice(0, cutIndex);
      const callIds = (ms: Message[]) =>
        new Set(ms.flatMap((m) => (m.toolCalls ?? []).map((call) => call.id)));
      const resultIds = (ms: Message[]) =>
        new Set(ms.flatMap((m) => (m.role === "tool" ? [m.toolCallId] : [])));
      const [keptCalls, keptResults] = [callIds(kept), resultIds(kept)];
      const [cutCalls, cutResults] = [callIds(cut), resultIds(cut)];
      for (const id of keptResults) assert.ok(keptCalls.has(id!), `kept result ${id} lost its call`);
      for (const id of keptCalls) assert.ok(keptResults.has(id), `kept call ${id} lost its result`);
      for (const id of cutResults) assert.ok(!keptCalls.has(id!), `cut result ${id} of a kept call`);
      for (const id of cutCalls) assert.ok(!keptResults.has(id), `cut call ${id} with a kept result`);
    }),
    { numRuns: RUNS },
  );
});

Deno.test("planCompaction() keeps at most maxRawTurns turns, and exactly that many when they fit the budget", () => {
  fc.assert(
    fc.property(PLAN_CASE, (c) => {
      const a = analyse(c);
      const plan = planCompaction(c.messages, c);
      const kept = plan === null ? c.messages : c.messages.slice(plan.cutIndex);
      assert.ok(users(kept) <= c.maxRawTurns, show(c));
      if (a.overTurns) {
        assert.notEqual(plan, null);
        assert.match(plan!.trigger, /^turns/);
        // The turn trigger keeps the last maxRawTurns turns; the cut goes further only to fit the budget.
        const first = a.starts.length - c.maxRawTurns;
        if (a.fits(first)) assert.equal(users(kept), c.maxRawTurns, show(c));
        else assert.ok(users(kept) < c.maxRawTurns || plan!.overBudget, show(c));
      }
    }),
    { numRuns: RUNS },
  );
});

Deno.test("planCompaction() cuts the fewest whole turns that fit the budget with the summary reserve", () => {
  fc.assert(
    fc.property(PLAN_CASE, (c) => {
      const a = analyse(c);
      const plan = planCompaction(c.messages, c);
      if (plan === null) return;
      const turn = a.starts.indexOf(plan.cutIndex);
      // The turn trigger cuts at least to the last maxRawTurns turns; the token trigger at least one turn, so
      // the merge can trim a stored summary that is over the reserve.
      const lowest = a.overTurns ? a.starts.length - c.maxRawTurns : a.starts.length > 1 ? 1 : 0;
      assert.ok(turn >= lowest, show(c));
      if (!plan.overBudget) {
        assert.ok(c.fixedTokens + a.reserve + a.tail[plan.cutIndex] <= c.maxCtxTokens, show(c));
      }
      // Minimal: keeping one more turn would not fit, unless a trigger required the cut.
      if (turn > lowest) assert.ok(!a.fits(turn - 1), `one turn too many cut: ${show(c)}`);
      // Over budget only when the current turn alone does not fit, or, with nothing before it to cut, the request
      // does not (a stored summary larger than the reserve stays as it is).
      assert.equal(plan.overBudget, !a.fits(turn) || (plan.cutIndex === 0 && a.overTokens), show(c));
      if (plan.overBudget) assert.equal(turn, a.starts.length - 1, show(c));
    }),
    { numRuns: RUNS },
  );
});

Deno.test("planCompaction() reports its trigger and estimates, and ends within budget unless overBudget", () => {
  fc.assert(
    fc.property(PLAN_CASE, (c) => {
      const a = analyse(c);
      const plan = planCompaction(c.messages, c);
      if (plan === null) return;
      const trigger = a.overTurns && a.overTokens ? "turns+tokens" : a.overTurns ? "turns" : "tokens";
      assert.equal(plan.trigger, trigger);
      assert.equal(plan.tokensBefore, a.tokensBefore);
      const after = plan.cutIndex === 0 ? a.tokensBefore : c.fixedTokens + a.reserve + a.tail[plan.cutIndex];
      assert.equal(plan.tokensAfter, after);
      if (!plan.overBudget) assert.ok(plan.tokensAfter <= c.maxCtxTokens, show(c));
    }),
    { numRuns: RUNS },
  );
});

// Regression: a stored summary larger than today's reserve (AGENT_MAX_CTX_TOKENS lowered since the last
// compaction) with messages that fit beside the reserve used to give null, so an over-budget request was sent
// with earlier turns left to cut. fast-check's minimal case: messages [user "", user ""] (2 tokens),
// {maxRawTurns: 2, maxCtxTokens: 200, fixedTokens: 0, currentSummaryTokens: 199} -> tokensBefore 201, null.
Deno.test("planCompaction() plans a cut whenever the request is over budget and an earlier turn exists", () => {
  // Any size of current summary: a stored one may exceed today's reserve (the budget was lowered since).
  const staleSummary: fc.Arbitrary<PlanCase> = fc.record({
    messages: fc.array(TURN, { minLength: 2, maxLength: 4 }).map(sessionOf),
    maxRawTurns: fc.integer({ min: 1, max: 30 }),
    maxCtxTokens: fc.integer({ min: 200, max: 8000 }),
    fixedTokens: fc.integer({ min: 0, max: 300 }),
    currentSummaryTokens: fc.integer({ min: 0, max: 8000 }),
  });
  fc.assert(
    fc.property(staleSummary, (c) => {
      const a = analyse(c);
      if (!a.overTokens || a.starts.length < 2) return;
      assert.notEqual(planCompaction(c.messages, c), null, show(c));
    }),
    { numRuns: RUNS },
  );
});

Deno.test("planCompaction() never throws, never mutates its input and cuts only at a user message for any roles", () => {
  const call = fc.record({
    id: fc.string({ maxLength: 4 }),
    name: fc.string({ maxLength: 8 }),
    arguments: text(40),
  }, {
    noNullPrototype: true,
  });
  const message: fc.Arbitrary<Message> = fc.record({
    role: fc.constantFrom("system", "user", "assistant", "tool", "runtime"),
    content: fc.option(text(200), { nil: null }),
    toolCalls: fc.array(call, { maxLength: 2 }),
    toolCallId: fc.string({ maxLength: 4 }),
  }, { requiredKeys: ["role", "content"], noNullPrototype: true });
  const options: fc.Arbitrary<PlanOptions> = fc.record({
    maxRawTurns: fc.integer({ min: 1, max: 10 }),
    maxCtxTokens: fc.integer({ min: 1, max: 3000 }),
    fixedTokens: fc.integer({ min: 0, max: 500 }),
    currentSummaryTokens: fc.integer({ min: 0, max: 500 }),
    summaryTokens: fc.integer({ min: 0, max: 500 }),
  }, { requiredKeys: ["maxRawTurns", "maxCtxTokens"] });
  fc.assert(
    fc.property(fc.array(message, { maxLength: 30 }), options, (messages, opts) => {
      const copy = structuredClone(messages);
      const plan = planCompaction(messages, opts);
      assert.deepEqual(messages, copy);
      if (plan === null) return;
      assert.ok(plan.cutIndex >= 0 && plan.cutIndex < messages.length);
      assert.equal(messages[plan.cutIndex].role, "user");
      if (!plan.overBudget) assert.ok(plan.tokensAfter <= opts.maxCtxTokens);
    }),
    { numRuns: RUNS },
  );
});

// ---------------------------------------------------------------------------------------------------------
// mergeSummary(), parseSummaryPatch(), fitSummary()

const BASE_ITEMS = ["Ada", "learn Deno", "ship v1 by Friday", "住在 北京", "straße", "İstanbul", "a b c"];
/** Summary items drawn from a small pool in varying case and spacing, so duplicates are frequent. */
const ITEM: fc.Arbitrary<string> = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.tuple(
      fc.constantFrom(...BASE_ITEMS),
      fc.constantFrom("same", "upper", "lower"),
      fc.constantFrom("", " ", "  ", "\t", "\n", "\u3000"),
    ).map(([base, kase, space]) => {
      const cased = kase === "upper" ? base.toUpperCase() : kase === "lower" ? base.toLowerCase() : base;
      return space + cased.split(" ").join(space === "" ? " " : space) + space;
    }),
  },
  { weight: 1, arbitrary: fc.constantFrom("", "   ", "\t") },
  { weight: 2, arbitrary: text(200) },
);
const LIST = fc.array(ITEM, { maxLength: 8 });
const PATCH: fc.Arbitrary<SummaryPatch> = fc.record({
  goals: LIST,
  facts: LIST,
  todos: LIST,
  unresolved: LIST,
});
const SUMMARY: fc.Arbitrary<Summary> = fc.record({
  goals: LIST,
  facts: LIST,
  todos: LIST,
  unresolved: LIST,
  updated_at: fc.constantFrom("", "2026-01-01T00:00:00.000Z"),
});

/** The documented notion of "the same item": case-insensitive, whitespace collapsed and trimmed. */
function sameKey(item: string): string {
  return item.toLowerCase().replace(/\s+/g, " ").trim();
}

Deno.test("mergeSummary() keeps at most 5 distinct items per field, new before old, and is idempotent", () => {
  fc.assert(
    fc.property(
      fc.option(SUMMARY, { nil: null }),
      PATCH,
      fc.date({ noInvalidDate: true }),
      (old, patch, now) => {
        const merged = mergeSummary(old, patch, now);
        assert.equal(merged.updated_at, now.toISOString());
        for (const field of SUMMARY_FIELDS) {
          const result = merged[field];
          const oldItems = old?.[field] ?? [];
          assert.ok(result.length <= MAX_SUMMARY_ITEMS);
          const keys = result.map(sameKey);
          assert.equal(new Set(keys).size, keys.length, `duplicates in ${field}: ${JSON.stringify(result)}`);
          assert.ok(keys.every((k) => k !== ""), "blank items are dropped");
          // Each item keeps the first spelling of its key, from the patch if the patch has it.
          const origins = result.map((item) => {
            const fromPatch = patch[field].find((p) => sameKey(p) === sameKey(item));
            assert.equal(item, fromPatch ?? oldItems.find((o) => sameKey(o) === sameKey(item)));
            return fromPatch === undefined ? "old" : "new";
          });
          assert.ok(!origins.join(",").includes("old,new"), `old before new in ${field}`);
          // An old item survives while fewer than 5 newer distinct items precede it.
          const newer = new Set(patch[field].map(sameKey).filter((k) => k !== ""));
          for (const item of oldItems) {
            const key = sameKey(item);
            if (key === "" || newer.has(key)) continue;
            if (newer.size < MAX_SUMMARY_ITEMS) {
              assert.ok(
                result.includes(item),
                `${item} was pushed out early`,
              );
            } else assert.ok(!result.includes(item));
            newer.add(key);
          }
          // Distinct items, new first, are exactly the first five.
          const distinct = new Set([...patch[field], ...oldItems].map(sameKey).filter((k) => k !== ""));
          assert.equal(result.length, Math.min(MAX_SUMMARY_ITEMS, distinct.size));
        }
        const again = mergeSummary(merged, patch, NOW);
        for (const field of SUMMARY_FIELDS) {
          assert.deepEqual(
            again[field],
            merged[field],
            `${field} not idempotent`,
          );
        }
      },
    ),
    { numRuns: RUNS },
  );
});

const CONTROL = fc.oneof(fc.integer({ min: 0, max: 0x1f }), fc.constant(0x7f)).map((c) =>
  String.fromCharCode(c)
);
/** Valid summary items: at most 200 characters, control characters (a pasted bell, a NUL) included. */
const VALID_ITEM = fc.oneof(
  { weight: 4, arbitrary: ITEM.filter((s) => s.length <= MAX_SUMMARY_ITEM_CHARS) },
  {
    weight: 1,
    arbitrary: fc.tuple(ITEM, CONTROL, fc.nat()).map(([item, control, at]) => {
      const chars = [...item]; // whole code points, so no surrogate pair is split
      chars.splice(at % (chars.length + 1), 0, control);
      return chars.join("");
    }).filter((s) => s.length <= MAX_SUMMARY_ITEM_CHARS),
  },
  { weight: 1, arbitrary: fc.constantFrom("x".repeat(200), " ".repeat(200), `  ${"é".repeat(198)}`) },
);
/** A summarizer's valid reply, as parsed. */
const VALID_PATCH: fc.Arbitrary<SummaryPatch> = fc.record({
  goals: fc.array(VALID_ITEM, { maxLength: 8 }),
  facts: fc.array(VALID_ITEM, { maxLength: 8 }),
  todos: fc.array(VALID_ITEM, { maxLength: 8 }),
  unresolved: fc.array(VALID_ITEM, { maxLength: 8 }),
});
const VALID_OBJECT = fc.record({
  goals: fc.array(VALID_ITEM, { maxLength: 6 }),
  facts: fc.array(VALID_ITEM, { maxLength: 6 }),
  todos: fc.array(VALID_ITEM, { maxLength: 6 }),
  unresolved: fc.array(VALID_ITEM, { maxLength: 6 }),
}, { requiredKeys: [] });
/** A JSON text as a model might send it: compact or indented, bare or in one ``` / ```json fence. */
const ENCODING = fc.record({
  indent: fc.constantFrom(0, 2),
  fence: fc.constantFrom("none", "```json\n%\n```", "```\n%\n```", "  ```json\n%```\n"),
});

function encode(value: unknown, { indent, fence }: { indent: number; fence: string }): string {
  const json = JSON.stringify(value, null, indent);
  return fence === "none" ? json : fence.replace("%", () => json);
}

Deno.test("parseSummaryPatch() accepts any object of string lists, bare or fenced, collapsing spaces and controls", () => {
  fc.assert(
    fc.property(VALID_OBJECT, ENCODING, (value, encoding) => {
      const patch = parseSummaryPatch(encode(value, encoding));
      for (const field of SUMMARY_FIELDS) {
        // Whitespace and control characters collapse to single spaces; blank items are dropped.
        const expected = (value[field] ?? [])
          // deno-lint-ignore no-control-regex
          .map((s) => s.replace(/[\u0000-\u001f\u007f]/g, " ").replace(/\s+/g, " ").trim())
          .filter((s) => s !== "");
        assert.deepEqual(patch[field], expected, field);
      }
      assert.deepEqual(Object.keys(patch), [...SUMMARY_FIELDS]);
    }),
    { numRuns: RUNS },
  );
});

const FIELD = fc.constantFrom(...SUMMARY_FIELDS);
const NOT_A_STRING = fc.oneof(
  fc.integer(),
  fc.boolean(),
  fc.constant(null),
  fc.array(fc.string({ maxLength: 3 }), { maxLength: 2 }),
  fc.dictionary(fc.string({ maxLength: 3 }), fc.string({ maxLength: 3 }), { maxKeys: 2 }),
);
const NOT_AN_ARRAY = fc.oneof(
  fc.constant(null),
  fc.string({ maxLength: 10 }),
  fc.integer(),
  fc.boolean(),
  fc.dictionary(fc.string({ maxLength: 3 }), fc.string({ maxLength: 3 }), { maxKeys: 2 }),
);
const SCHEMA_VIOLATION: fc.Arbitrary<{ what: string; value: (valid: Record<string, unknown>) => unknown }> =
  fc
    .oneof(
      fc.string({ maxLength: 12 }).filter((k) => !(SUMMARY_FIELDS as readonly string[]).includes(k)).map((
        key,
      ) => ({
        what: `unknown key ${JSON.stringify(key)}`,
        value: (valid: Record<string, unknown>) => Object.fromEntries([...Object.entries(valid), [key, []]]),
      })),
      fc.tuple(FIELD, NOT_AN_ARRAY).map(([field, bad]) => ({
        what: `${field} = ${JSON.stringify(bad)}`,
        value: (valid: Record<string, unknown>) => ({ ...valid, [field]: bad }),
      })),
      fc.tuple(FIELD, NOT_A_STRING, fc.nat()).map(([field, bad, at]) => ({
        what: `${field} holds ${JSON.stringify(bad)}`,
        value: (valid: Record<string, unknown>) => {
          const items = [...((valid[field] ?? []) as unknown[])];
          items.splice(at % (items.length + 1), 0, bad);
          return { ...valid, [field]: items };
        },
      })),
      fc.tuple(FIELD, fc.string({ unit: UNIT, minLength: 201, maxLength: 260 })).map(([field, long]) => ({
        what: `${field} holds a ${long.length}-character item`,
        value: (valid: Record<string, unknown>) => ({ ...valid, [field]: [long] }),
      })),
      fc.constantFrom([], [["a"]], "text", 42, null, true).map((top) => ({
        what: `top-level ${JSON.stringify(top)}`,
        value: () => top,
      })),
    );

Deno.test("parseSummaryPatch() rejects unknown keys, non-lists (null too), non-strings and long items with TypeError", () => {
  fc.assert(
    fc.property(VALID_OBJECT, SCHEMA_VIOLATION, ENCODING, (valid, violation, encoding) => {
      const reply = encode(violation.value(valid), encoding);
      assert.throws(() => parseSummaryPatch(reply), (error) => {
        assert.ok(error instanceof TypeError, `${violation.what}: ${error}`);
        assert.match(error.message, /^Cannot accept summary: /);
        return true;
      }, violation.what);
    }),
    { numRuns: RUNS },
  );
});

Deno.test("parseSummaryPatch() throws SyntaxError for a reply that is not JSON, bare or fenced", () => {
  const truncated = fc.tuple(VALID_OBJECT, fc.nat()).map(([value, at]) => {
    const json = JSON.stringify(value);
    return json.slice(0, at % json.length);
  });
  const prose = fc.constantFrom("Sure! Here is the summary.", "", "   ", "{goals: []}", "{'goals': []}");
  fc.assert(
    fc.property(
      fc.oneof(truncated, prose),
      fc.constantFrom("%", "```json\n%\n```", "```\n%```"),
      (bad, fence) => {
        assert.throws(() => parseSummaryPatch(fence.replace("%", () => bad)), SyntaxError);
      },
    ),
    { numRuns: RUNS },
  );
});

// Regression: `record[field] ?? []` once accepted {"goals": null} as an empty list, unlike every other
// non-array value.
Deno.test("parseSummaryPatch() rejects a null field like any other non-array value", () => {
  for (const field of SUMMARY_FIELDS) {
    assert.throws(() => parseSummaryPatch(`{"${field}": null}`), TypeError, field);
  }
});

/** Tokens of the [RUNTIME CONTEXT] message of a summary, as compaction counts them. */
function blockTokens(summary: Summary): number {
  return estimateMessageTokens({ role: "system", content: runtimeContextText(summary) });
}

function itemChars(summary: Summary): number {
  return SUMMARY_FIELDS.reduce((n, field) => n + summary[field].join("").length, 0);
}

Deno.test("fitSummary() fits whenever an empty summary would, keeping a prefix of each field", () => {
  const empty = (s: Summary): Summary => ({ ...s, goals: [], facts: [], todos: [], unresolved: [] });
  fc.assert(
    fc.property(
      SUMMARY,
      fc.integer({ min: 0, max: 700 }),
      fc.constantFrom(blockTokens, itemChars),
      (summary, max, tokensOf) => {
        const fitted = fitSummary(summary, max, tokensOf);
        if (tokensOf(summary) <= max) assert.equal(fitted, summary, "returned as is when it fits");
        if (tokensOf(empty(summary)) <= max) assert.ok(tokensOf(fitted) <= max);
        assert.equal(fitted.updated_at, summary.updated_at);
        for (const field of SUMMARY_FIELDS) {
          assert.deepEqual(
            fitted[field],
            summary[field].slice(0, fitted[field].length),
            `${field} not a prefix`,
          );
        }
        // The longest field loses items first: a trimmed field is never two shorter than another field.
        for (const field of SUMMARY_FIELDS) {
          if (fitted[field].length === summary[field].length) continue;
          for (const other of SUMMARY_FIELDS) assert.ok(fitted[field].length + 1 >= fitted[other].length);
        }
      },
    ),
    { numRuns: RUNS },
  );
});

// ---------------------------------------------------------------------------------------------------------
// compactIfDue() end to end on an in-memory store

const CALCULATOR_SCHEMA: ToolSchema = {
  name: calculatorTool.name,
  description: calculatorTool.description,
  parameters: calculatorTool.parameters as Record<string, unknown>,
};

interface Fixed {
  systemPrompt: string;
  tools: readonly ToolSchema[];
}

const FIXED: fc.Arbitrary<Fixed> = fc.record({
  systemPrompt: fc.oneof(fc.constant(SYSTEM_PROMPT), text(200)),
  tools: fc.constantFrom([], [CALCULATOR_SCHEMA]),
});

/** A stored summary as an earlier compaction under `maxCtxTokens` would have left it. */
function earlierSummary(patch: SummaryPatch | null, maxCtxTokens: number): string | null {
  if (patch === null) return null;
  const merged = mergeSummary(null, parseSummaryPatch(JSON.stringify(patch)), new Date(0));
  return JSON.stringify(fitSummary(merged, summaryReserve(maxCtxTokens), blockTokens));
}

function stamp(messages: readonly Message[], from: number): StoredMessage[] {
  return messages.map((m, i) => {
    const stored: StoredMessage = {
      id: `m${from + i}`,
      role: m.role,
      content: m.content,
      createdAt: new Date(Date.UTC(2026, 0, 1) + from + i).toISOString(),
    };
    if (m.toolCalls !== undefined) stored.toolCalls = m.toolCalls;
    if (m.toolCallId !== undefined) stored.toolCallId = m.toolCallId;
    return stored;
  });
}

/** A session in a fresh in-memory store, with its messages appended and an optional earlier summary. */
async function openSession(messages: readonly Message[], summary: string | null) {
  const store = new SqliteStore(":memory:", { now: steppingClock() });
  await store.getOrCreate(keyOf("s1", "u1"));
  const stored = stamp(messages, 0);
  await store.append(keyOf("s1", "u1"), stored);
  if (summary !== null) await store.applyCompaction(keyOf("s1", "u1"), summary, [], 0);
  const state: MemoryState = {
    key: keyOf("s1", "u1"),
    summary,
    history: await store.messages(keyOf("s1", "u1")),
  };
  assert.deepEqual(state.history, stored, "the store gives back what was appended");
  return { store, state, stored, [Symbol.dispose]: () => store.close() };
}

function requestTokens(state: MemoryState, fixed: Fixed): number {
  const request = buildContext(state.history, { summary: state.summary, systemPrompt: fixed.systemPrompt });
  return estimateRequestTokens(request, fixed.tools);
}

function compact(state: MemoryState, fixed: Fixed, store: SqliteStore, summarizer: Summarizer, limits: {
  maxRawTurns: number;
  maxCtxTokens: number;
}): Promise<CompactionResult | null> {
  const system: Message[] = [{ role: "system", content: fixed.systemPrompt }];
  return compactIfDue(state, { system, tools: fixed.tools }, {
    store,
    summarizer,
    now: () => NOW,
    ...limits,
  });
}

/** The session's stored accounting adds up: every user turn is either stored raw or folded into the summary. */
async function assertAccounting(store: SqliteStore, state: MemoryState): Promise<void> {
  const session = (await store.get(keyOf("s1", "u1")))!;
  assert.deepEqual(
    await store.messages(keyOf("s1", "u1")),
    state.history,
    "the store holds exactly the state's history",
  );
  assert.equal(session.summary, state.summary);
  assert.equal(session.turnCount, session.compactedTurns + users(state.history));
  if (state.summary !== null) {
    const summary = parseSummary(state.summary);
    assert.notEqual(summary, null, "the stored summary parses");
    for (const field of SUMMARY_FIELDS) {
      assert.ok(summary![field].length <= MAX_SUMMARY_ITEMS);
      for (const item of summary![field]) assert.ok(item.isWellFormed(), `lone surrogate: ${item}`);
    }
  }
}

const E2E_CASE = fc.record({
  messages: SESSION,
  maxRawTurns: fc.integer({ min: 1, max: 30 }),
  maxCtxTokens: fc.integer({ min: 200, max: 8000 }),
  fixed: FIXED,
  previous: fc.option(VALID_PATCH, { nil: null }),
});

/**
 * Found by the property: under a budget of 200 the reserve (50) is smaller than an empty summary's block (59),
 * and a plan made with the reserve ended at 201 without saying over_budget.
 */
const SMALL_BUDGET_CASE: typeof E2E_CASE extends fc.Arbitrary<infer T> ? T : never = {
  messages: [
    { role: "user", content: "" },
    { role: "user", content: "a" },
    {
      role: "assistant",
      content: null,
      toolCalls: [{ id: "call_1_0_0", name: "calculator", arguments: '{"expression":"1+2"}' }],
    },
    {
      role: "tool",
      content: '{"ok":true,"data":{"expression":"1+2","result":3},"error":null,"truncated":false}',
      toolCallId: "call_1_0_0",
    },
    { role: "runtime", content: EMPTY_REPLY_NUDGE },
    { role: "assistant", content: "\u00a1A A\u0300  !A\u00a1A\u00a10A{\uac00\u00a1\uac000" },
  ],
  maxRawTurns: 1,
  maxCtxTokens: 200,
  fixed: {
    systemPrompt: "a`a a\u00dfa\u00dfa\u3002a'a?a\u0130a\u00e9a  a\\a\u4e16\u754ca  a\"a\ta\u001b[A\n",
    tools: [],
  },
  previous: null,
};

Deno.test("compactIfDue() deletes exactly the cut, stores a valid summary and ends within budget unless over_budget", async () => {
  await fc.assert(
    fc.asyncProperty(E2E_CASE, async (c) => {
      using session = await openSession(c.messages, earlierSummary(c.previous, c.maxCtxTokens));
      const { store, state, stored } = session;
      const before = (await store.get(keyOf("s1", "u1")))!;
      const limits = { maxRawTurns: c.maxRawTurns, maxCtxTokens: c.maxCtxTokens };
      const result = await compact(state, c.fixed, store, deterministicSummarizer, limits);
      const plan = planCompaction(stored, {
        ...limits,
        fixedTokens: estimateRequestTokens(
          [{ role: "system", content: c.fixed.systemPrompt }],
          c.fixed.tools,
        ),
        currentSummaryTokens: state.summary === null ? 0 : blockTokens(parseSummary(state.summary)!),
        summaryTokens: summaryRoom(c.maxCtxTokens),
      });
      if (result === null || result.event.ok !== true) {
        // Nothing due, or nothing to cut before an over-budget current turn: the session is untouched.
        assert.equal(result === null, plan === null);
        if (result !== null) assert.deepEqual(result.event.over_budget, true, JSON.stringify(result.event));
        assert.equal(result?.state ?? state, state);
        await assertAccounting(store, state);
        assert.deepEqual(await store.get(keyOf("s1", "u1")), before);
        if (result === null) assert.ok(requestTokens(state, c.fixed) <= c.maxCtxTokens);
        return;
      }
      assert.ok(plan !== null && plan.cutIndex > 0);
      const { state: after, event } = result;
      assert.deepEqual(after.history, stored.slice(plan.cutIndex));
      await assertAccounting(store, after);
      assert.equal(
        (await store.get(keyOf("s1", "u1")))!.compactedTurns,
        users(stored.slice(0, plan.cutIndex)),
      );
      assert.equal(event.messages_removed, plan.cutIndex);
      assert.equal(event.over_budget, plan.overBudget);
      assert.equal(parseSummary(after.summary)!.updated_at, NOW.toISOString());
      const tokens = requestTokens(after, c.fixed);
      assert.equal(event.tokens_after, tokens);
      if (!plan.overBudget) assert.ok(tokens <= c.maxCtxTokens, `${tokens} > ${c.maxCtxTokens}`);
      assert.ok(users(after.history) <= c.maxRawTurns);
    }),
    { numRuns: RUNS, examples: [[SMALL_BUDGET_CASE]] },
  );
});

Deno.test("compactIfDue() before every model call keeps a growing session consistent and within budget", async () => {
  const growing = fc.record({
    turns: TURNS,
    maxRawTurns: fc.integer({ min: 1, max: 12 }),
    // From 300: below about 240 not even an empty summary's block (59 estimated tokens) fits the reserve of
    // a quarter of the budget.
    maxCtxTokens: fc.integer({ min: 300, max: 4000 }),
    fixed: fc.record({ systemPrompt: text(100), tools: fc.constantFrom([], [CALCULATOR_SCHEMA]) }),
  });
  await fc.assert(
    fc.asyncProperty(growing, async (c) => {
      using session = await openSession([], null);
      const { store } = session;
      let state = session.state;
      let next = 0;
      for (const [t, turn] of c.turns.entries()) {
        for (const group of turnGroups(turn, t)) {
          const stored = stamp(group, next);
          next += group.length;
          await store.append(keyOf("s1", "u1"), stored);
          state = { ...state, history: [...state.history, ...stored] };
          // The loop compacts before each model call: after the user message, a tool round or a nudge.
          if (group[0].role === "assistant" && group.length === 1) continue;
          const result = await compact(state, c.fixed, store, deterministicSummarizer, c);
          if (result !== null) {
            assert.ok(
              result.event.ok === true || result.event.over_budget === true,
              JSON.stringify(result.event),
            );
            state = result.state;
          }
          await assertAccounting(store, state);
          assert.ok(users(state.history) <= c.maxRawTurns);
          assert.equal(state.history.findLast((m) => m.role === "user")?.content, turn.user);
          if (result?.event.over_budget !== true) {
            const tokens = requestTokens(state, c.fixed);
            assert.ok(tokens <= c.maxCtxTokens, `turn ${t}: ${tokens} > ${c.maxCtxTokens}`);
          }
        }
      }
    }),
    { numRuns: 100 },
  );
});

/** Summarizers that fail: invalid JSON, a schema violation, a rejection, a synchronous throw. */
const BROKEN: fc.Arbitrary<{ summarizer: Summarizer; reason: (reason: string) => boolean }> = fc.oneof(
  fc.constantFrom("Sure! Here is the summary.", "", "{", '{"goals": ["a"]', "```json\n{\n```").map((
    text,
  ) => ({
    summarizer: () => Promise.resolve({ text, usage: null }),
    reason: (reason: string) => reason.startsWith("summary is not valid JSON: "),
  })),
  fc.constant({
    summarizer: () => Promise.resolve({ text: '{"goals": [1]}', usage: null }),
    reason: (reason: string) => reason === "Cannot accept summary: goals[0] must be a string, got number",
  }),
  text(60).map((message) => ({
    summarizer: () => Promise.reject(new Error(message)),
    reason: (reason: string) => reason === message,
  })),
  text(60).map((message) => ({
    summarizer: (): never => {
      throw new Error(message);
    },
    reason: (reason: string) => reason === message,
  })),
);

Deno.test("compactIfDue() abandons a compaction whose summarizer fails and leaves messages and summary as they were", async () => {
  const broken = fc.array(TURN, { minLength: 2, maxLength: 12 }).chain((turns) =>
    fc.record({
      messages: fc.constant(sessionOf(turns)),
      maxRawTurns: fc.integer({ min: 1, max: turns.length - 1 }),
      maxCtxTokens: fc.integer({ min: 200, max: 8000 }),
      fixed: FIXED,
      previous: fc.option(VALID_PATCH, { nil: null }),
      broken: BROKEN,
    })
  );
  await fc.assert(
    fc.asyncProperty(broken, async (c) => {
      using session = await openSession(c.messages, earlierSummary(c.previous, c.maxCtxTokens));
      const { store, state, stored } = session;
      const before = (await store.get(keyOf("s1", "u1")))!;
      const result = await compact(state, c.fixed, store, c.broken.summarizer, c);
      assert.ok(result !== null, "the turn trigger fired");
      assert.equal(result.event.ok, false);
      assert.ok(c.broken.reason(String(result.event.reason)), String(result.event.reason));
      assert.equal(result.state, state);
      assert.deepEqual(await store.messages(keyOf("s1", "u1")), stored);
      assert.deepEqual(await store.get(keyOf("s1", "u1")), before);
    }),
    { numRuns: RUNS },
  );
});

// ---------------------------------------------------------------------------------------------------------
// Examples

const CALL_6X7: CallSpec = {
  name: "calculator",
  args: '{"expression":"6*7"}',
  result: ok({ expression: "6*7", result: 42 }),
};

Deno.test("planCompaction() on the turn trigger keeps the last turns whole, tool rounds and nudges included", () => {
  const messages = sessionOf([
    { user: "one", rounds: [], nudge: false, answer: "a1" },
    {
      user: "two",
      rounds: [{ content: null, calls: [CALL_6X7, CALL_6X7] }],
      nudge: true,
      answer: EMPTY_ANSWER,
    },
    { user: "three", rounds: [{ content: "let me check", calls: [CALL_6X7] }], nudge: false, answer: null },
  ]);
  const plan = planCompaction(messages, { maxRawTurns: 2, maxCtxTokens: 100_000 })!;
  assert.equal(plan.cutIndex, 2);
  assert.equal(plan.trigger, "turns");
  assert.equal(plan.overBudget, false);
  assert.deepEqual(
    messages.slice(plan.cutIndex).map((m) => m.role).join(","),
    [
      "user,assistant,tool,tool,runtime,assistant",
      "user,assistant,tool",
    ].join(","),
  );
});

Deno.test("planCompaction() on the token trigger cuts past the turn limit to leave room for the summary", () => {
  const turn = (n: number): TurnSpec => ({
    user: `${n} ${"x".repeat(396)}`,
    rounds: [],
    nudge: false,
    answer: null,
  });
  const messages = sessionOf([turn(1), turn(2), turn(3), turn(4)]);
  const t = estimateMessageTokens(messages[0]); // the same for each message
  // Budget 4t-4 - reserve t-1 - fixed 0 = 3t-3: only the last two turns (2t) fit, not three (3t).
  const plan = planCompaction(messages, { maxRawTurns: 3, maxCtxTokens: 4 * t - 4 })!;
  assert.equal(plan.trigger, "turns+tokens");
  assert.equal(plan.cutIndex, 2);
  assert.equal(plan.tokensBefore, 4 * t);
  assert.equal(plan.tokensAfter, t - 1 + 2 * t);
});

Deno.test("mergeSummary() of the same patch twice changes nothing but the date", () => {
  const patch = {
    goals: ["Ship v1", "ship  V1"],
    facts: ["a", "b", "c", "d", "e", "f"],
    todos: [],
    unresolved: [" "],
  };
  const once = mergeSummary(
    { goals: ["old"], facts: ["z"], todos: ["t"], unresolved: [], updated_at: "" },
    patch,
    NOW,
  );
  assert.deepEqual(once, {
    goals: ["Ship v1", "old"],
    facts: ["a", "b", "c", "d", "e"],
    todos: ["t"],
    unresolved: [],
    updated_at: NOW.toISOString(),
  });
  assert.deepEqual(mergeSummary(once, patch, new Date(0)), {
    ...once,
    updated_at: new Date(0).toISOString(),
  });
});

// Regression: parseSummaryPatch() used to reject items with control characters, which deterministicSummarizer()
// copies from user text, so one user message holding one (an arrow key in the REPL sends ESC "[A") made every
// later compaction of the session fail ("facts[0] contains control characters") and its history grow without
// bound. Minimal case: messages [user "\u0000", user "b"], maxRawTurns 1.
Deno.test("compactIfDue() with deterministicSummarizer compacts a user message holding a control character", async () => {
  using session = await openSession([
    { role: "user", content: "go up \u001b[A please" },
    { role: "assistant", content: "ok" },
    { role: "user", content: "next" },
  ], null);
  const fixed = { systemPrompt: "s", tools: [] };
  const limits = { maxRawTurns: 1, maxCtxTokens: 6000 };
  const result = await compact(session.state, fixed, session.store, deterministicSummarizer, limits);
  assert.equal(result?.event.ok, true, JSON.stringify(result?.event));
  assert.deepEqual(parseSummary(result!.state.summary)!.facts, ["User said: go up [A please"]);
});

// Regression: deterministicSummarizer() shortened items with `flat.slice(0, 159)`, cutting a character outside
// the BMP (an emoji, a rare CJK ideograph) that straddles position 159 in two; the stored summary then held a
// lone surrogate, sent as "\ud83d", which strict JSON parsers reject. Minimal case: user "x".repeat(147) +
// "😀" -> facts[0] === "User said: " + "x".repeat(147) + "\ud83d…".
Deno.test("deterministicSummarizer() never splits a character when it shortens an item", async () => {
  const long = fc.string({ unit: fc.constantFrom("x", " ", "😀", "𠀀"), minLength: 140, maxLength: 200 });
  await fc.assert(
    fc.asyncProperty(long, async (content) => {
      const reply = await deterministicSummarizer({ previous: null, messages: [{ role: "user", content }] });
      const patch = parseSummaryPatch(reply.text);
      for (const field of SUMMARY_FIELDS) {
        for (const item of patch[field]) {
          assert.ok(item.isWellFormed(), `lone surrogate in ${JSON.stringify(item)}`);
        }
      }
    }),
    { numRuns: RUNS },
  );
});
