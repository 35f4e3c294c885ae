/**
 * Smoke tests of the bench: its measurement functions at tiny sizes return well-formed, sane results. Shapes
 * and counts only, never a time threshold: the machine's speed is not under test.
 */
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { parseSummaryPatch } from "../src/memory/summary.ts";
import { summaryAsk } from "../src/memory/summarizer.ts";
import type { Message } from "../src/types.ts";
import { distribution, median, percentile } from "../scripts/_bench_process.ts";
import { answer, completion } from "../scripts/_fake_provider.ts";
import { commonPrefixBytes, PrefixMeter } from "../scripts/_bench_turns.ts";
import {
  type BenchReport,
  formatReport,
  judgeTargets,
  measureGrowth,
  measureHttp,
  measureMemory,
  measureOverhead,
  measureRecall,
  measureRuntimeWork,
  measureStartup,
  measureSustained,
  openBenchRuntime,
} from "../scripts/bench.ts";

function assertPositiveFinite(value: number, what: string): void {
  assert.ok(Number.isFinite(value) && value > 0, `${what} must be positive and finite, got ${value}`);
}

Deno.test("bench provider answers a sum with a call, a result with an answer, a summary with JSON", () => {
  const call = answer({ messages: [{ role: "user", content: "what is 12*(3+4)?" }] });
  assert.equal(call.kind, "tool_call");
  const calls = call.message.tool_calls as { function: { arguments: string } }[];
  assert.deepEqual(JSON.parse(calls[0].function.arguments), { expression: "12*(3+4)" });

  const tool = JSON.stringify({ ok: true, data: { expression: "12*(3+4)", result: 84 }, error: null });
  const final = answer({ messages: [{ role: "tool", content: tool }] });
  assert.equal(final.kind, "answer");
  assert.match(String(final.message.content), /84/);

  const removed = [{ role: "user", content: "what is 12*(3+4)?" }, { role: "tool", content: tool }];
  const kept = [{ role: "user", content: "thanks" }];
  const ask = summaryAsk(null, removed as Message[], kept as Message[]);
  const summary = answer({
    messages: [{ role: "system", content: "the system prompt" }, ...removed, ...kept, {
      role: "user",
      content: ask,
    }],
  });
  assert.equal(summary.kind, "summary");
  const patch = parseSummaryPatch(String(summary.message.content));
  assert.deepEqual(patch.facts, ["The calculator returned 84."]);
});

Deno.test("PrefixMeter counts the bytes each body shares with the start of the one before", () => {
  const encode = (text: string) => new TextEncoder().encode(text);
  assert.equal(commonPrefixBytes(encode("abcd"), encode("abxy")), 2);
  assert.equal(commonPrefixBytes(encode("ab"), encode("abc")), 2);
  const body = (messages: string[]) => JSON.stringify({ model: "m", messages, tools: ["t"] });
  const meter = new PrefixMeter();
  const [a, b, c] = [body(["x"]), body(["x", "y"]), body(["z", "y"])];
  for (const text of [a, b, c]) meter.add(text);
  const result = meter.result();
  assert.equal(result.requests, 3);
  const shared = `{"model":"m","messages":["x"`.length + `{"model":"m","messages":["`.length;
  assert.equal(result.share, shared / (a.length + b.length + c.length));
  const tools = 2 * `"tools":["t"]`.length;
  assert.equal(result.withTools, (shared + tools) / (a.length + b.length + c.length));
  assert.equal(result.perRequest.count, 2);
  assert.equal(new PrefixMeter().result().share, 0);
});

Deno.test("bench statistics give the nearest-rank percentile and the middle median", () => {
  assert.equal(median([3, 1, 2]), 2);
  assert.equal(median([4, 1, 2, 3]), 2.5);
  assert.equal(percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 95), 10);
  assert.equal(percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 50), 5);
  assert.deepEqual(distribution([]).count, 0);
});

Deno.test("measureOverhead() times runtime and floor turns and gives a positive, finite ratio", async () => {
  const result = await measureOverhead({ rounds: 1, turns: 3 });
  assert.equal(result.runtime.all.count, 3);
  assert.equal(result.floor.all.count, 3);
  assert.equal(result.inMemory.all.count, 3);
  assertPositiveFinite(result.inMemoryRatio, "inMemoryRatio");
  assert.equal(result.inMemory.plain.count, 3);
  assert.equal(result.floorWithSummaries.count, 3);
  assert.equal(result.plainLoop.count, 3);
  assertPositiveFinite(result.plainLoopRatio, "plainLoopRatio");
  assertPositiveFinite(result.runtime.all.median, "runtime median");
  assertPositiveFinite(result.floor.all.median, "floor median");
  assertPositiveFinite(result.ratio, "ratio");
  assertPositiveFinite(result.p95Ratio, "p95 ratio");
  assert.equal(result.roundRatios.length, 1);
  // Three turns stay under the default 20 raw turns: no compaction, so no summary call.
  assert.equal(result.summaryCallsPerRound, 0);
  assert.equal(result.runtime.besideCompaction.count, 0);
  assert.equal(result.latencyMs, 0);
});

Deno.test("openBenchRuntime({persist: false}) answers a turn without writing a database or a trace file", async () => {
  const dir = Deno.makeTempDirSync();
  try {
    const model: typeof fetch = (_input, init) => {
      const body = JSON.parse(String(init?.body));
      const message = answer(body).message;
      return Promise.resolve(Response.json(completion(body.model, message, 10)));
    };
    const runtime = openBenchRuntime(dir, "http://127.0.0.1:9/v1", { persist: false, fetch: model });
    try {
      const result = await runtime.turn("s", "what is 6*7?");
      assert.equal(result.outcome, "answered");
      assert.match(result.answer, /42/);
      assert.equal(
        (await runtime.store.messages({ userId: "bench", sessionId: "s" })).length,
        4,
        "the turn is stored, in memory",
      );
    } finally {
      await runtime.close();
    }
    assert.equal(existsSync(runtime.dbPath), false);
    assert.equal(existsSync(runtime.tracePath), false);
    assert.deepEqual([...Deno.readDirSync(dir)], []);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("measureRuntimeWork() times turns against an in-process model, and the background compactions apart", async () => {
  const result = await measureRuntimeWork({ rounds: 1, turns: 33 });
  assert.equal(result.all.count, 33);
  // The defaults (20 raw turns, batches of 10): turn 31's answer starts the one compaction.
  assert.equal(result.backgroundCompaction.count, 1);
  assert.equal(result.compactionsPerTurn, 1 / 33);
  for (const [name, value] of Object.entries({ all: result.all.median, stub: result.stubMedianUs })) {
    assertPositiveFinite(value, name);
  }
  await assert.rejects(() => measureRuntimeWork({ rounds: 0 }), RangeError);
});

Deno.test("measureRecall() times turns with the user's memory on, recall off and memory off over users holding items", async () => {
  const result = await measureRecall({ users: 3, itemsPerUser: 20, rounds: 1, turns: 12 });
  assert.equal(result.turnWithMemoryUs.count, 12);
  assert.equal(result.turnWithoutRecallUs.count, 12);
  assert.equal(result.turnWithoutMemoryUs.count, 12);
  assert.equal(result.recallQueryUs.count, 12);
  // Turns 10-12 ask about "10" to "12", which some items hold; turns 1-9 only single digits, which recall skips.
  assert.ok(result.recalledPerQuery > 0 && result.recalledPerQuery <= 5, String(result.recalledPerQuery));
  for (const name of ["fillSeconds", "dbBytes"] as const) assertPositiveFinite(result[name], name);
  assert.ok(Number.isFinite(result.costRatio));
  assert.ok(Number.isFinite(result.recallCostRatio));
});

Deno.test("measureGrowth() over 43 turns compacts in batches at the default thresholds, in budget", async () => {
  const result = await measureGrowth({ turns: 43 });
  assert.equal(result.turns, 43);
  assert.equal(result.window, 21);
  assertPositiveFinite(result.ratio, "growth ratio");
  assertPositiveFinite(result.driftCorrectedRatio, "drift-corrected growth ratio");
  assert.equal(result.requestBytesFirstTurn.length, 2);
  assert.equal(result.requestBytesLastTurn.length, 2);
  for (const bytes of [...result.requestBytesFirstTurn, ...result.requestBytesLastTurn]) assert.ok(bytes > 0);
  assert.ok(
    result.requestBytesLastTurn[0] > result.requestBytesFirstTurn[0],
    "the history grows the request",
  );
  assert.ok(
    result.summaryCalls >= 1,
    `compaction must have called the summarizer, got ${result.summaryCalls}`,
  );
  assert.equal(result.compactions.ok, result.summaryCalls);
  assert.equal(result.compactions.failed, 0);
  // After turns 31 and 42 (over 20 + 10 raw turns, cut back to 20): two summary calls, 86 + 2 requests.
  assert.equal(result.summaryCalls, 2);
  assert.equal(result.modelRequestsCountedTurns, 43);
  assert.equal(result.modelRequestsPerTurn, 88 / 43);
  // Each request repeats the one before but for what was added, a compaction's changes and the recall.
  assert.equal(result.requestPrefix.requests, 86);
  assert.equal(result.requestPrefix.perRequest.count, 85);
  assert.ok(
    result.requestPrefix.share > 0.5 && result.requestPrefix.share < 1,
    String(result.requestPrefix.share),
  );
  assert.ok(result.requestPrefix.withTools > result.requestPrefix.share);
  assert.equal(result.maxCtxTokens, 6000);
  assert.ok(result.underBudget);
  assert.ok(result.dbBytes > 0 && result.traceBytes > 0);
});

Deno.test("measureHttp() serves 2 clients × 2 turns, also on one session, without errors", async () => {
  const result = await measureHttp({
    clients: [2],
    turnsPerClient: 2,
    sharedClients: 2,
    latencyMs: 5,
    idleMs: 1,
  });
  assert.equal(result.exitCode, 0);
  assert.equal(result.rows.length, 2);
  const [distinct, shared] = result.rows;
  assert.equal(distinct.sessions, "distinct");
  assert.equal(distinct.turns, 4);
  assert.equal(distinct.errors, 0);
  assert.equal(distinct.wrongAnswers, 0);
  assertPositiveFinite(distinct.turnsPerSecond, "turns/s");
  assertPositiveFinite(distinct.efficiency, "efficiency");
  assertPositiveFinite(distinct.efficiencyVsFloor ?? NaN, "efficiency against the floor");
  assertPositiveFinite(distinct.floorTurnsPerSecond ?? NaN, "floor turns/s");
  assert.equal(shared.sessions, "one");
  assert.equal(shared.turns, 4);
  assert.equal(shared.errors, 0);
  for (const row of result.rows) {
    assertPositiveFinite(row.rssPeakMiB, "RSS peak");
    assertPositiveFinite(row.rssAfterMiB, "RSS after");
  }
  assertPositiveFinite(result.rssIdleMiB ?? NaN, "RSS idle");
});

Deno.test("measureMemory() and measureStartup() read serve's RSS and time serve and chat", async () => {
  const memory = await measureMemory({ sessions: 5, concurrency: 2 });
  assert.equal(memory.listed, 5);
  assert.equal(memory.errors, 0);
  assert.equal(memory.exitCode, 0);
  for (const rss of [memory.idleRssMiB, memory.afterCreateRssMiB, memory.afterListRssMiB]) {
    assertPositiveFinite(rss, "RSS");
  }
  const startup = await measureStartup({ repeats: 1 });
  assert.ok(startup.chatOk);
  assertPositiveFinite(startup.serveMedianMs, "serve start-up");
  assertPositiveFinite(startup.chatMedianMs, "chat start-up");

  const partial = { mode: "quick" as const, machine: "x", seconds: 1, memory, startup };
  const report: BenchReport = { ...partial, targets: judgeTargets(partial) };
  assert.equal(report.targets.overhead, null);
  assert.equal(typeof report.targets.memory, "boolean");
  const text = formatReport(report);
  assert.match(text, /4a\. Memory: VmRSS of serve/);
  assert.match(text, /afterCreateRssMiB +\d/);
  assert.match(text, /memory +(true|false)/);
});

Deno.test("judgeTargets() meets HTTP at 90% / 80% of ideal and its RSS at 150 MB during and after 64 clients", () => {
  const row = (clients: number, efficiency: number, rssPeakMiB: number, rssAfterMiB = 100) => ({
    clients,
    sessions: "distinct",
    efficiency,
    errors: 0,
    rssPeakMiB,
    rssAfterMiB,
  });
  const judge = (rows: ReturnType<typeof row>[]) => {
    const http = { rows } as unknown as BenchReport["http"];
    return judgeTargets({ mode: "quick", machine: "x", seconds: 1, http });
  };
  // 150 MB is 143.05 MiB.
  assert.deepEqual(judge([row(16, 0.9, 90), row(64, 0.8, 143)]).http, true);
  assert.deepEqual(judge([row(16, 0.9, 90), row(64, 0.8, 143)]).httpRss, true);
  assert.equal(judge([row(16, 0.9, 90), row(64, 0.79, 143)]).http, false);
  assert.equal(judge([row(16, 0.9, 90), row(64, 0.8, 144)]).httpRss, false);
  assert.equal(judge([row(16, 0.9, 90), row(64, 0.8, 120, 144)]).httpRss, false);
  assert.equal(judge([row(16, 0.9, 90)]).httpRss, null);
});

Deno.test("judgeTargets() meets the sustained load's RSS at 200 MiB peak and 120 MiB 30 s after, with no errors", () => {
  const judge = (peakRssMiB: number, idleRssMiB: number, errors = 0) => {
    const sustained = { peakRssMiB, idleRssMiB, errors } as unknown as BenchReport["sustained"];
    return judgeTargets({ mode: "quick", machine: "x", seconds: 1, sustained }).sustainedRss;
  };
  assert.equal(judge(200, 120), true);
  assert.equal(judge(200.5, 100), false);
  assert.equal(judge(150, 120.5), false);
  assert.equal(judge(150, 100, 1), false);
  assert.equal(judgeTargets({ mode: "quick", machine: "x", seconds: 1 }).sustainedRss, null);
});

Deno.test("measureSustained() runs its clients until the deadline, on one shared session and their own, and reads memory on the way", async () => {
  const result = await measureSustained({
    durationMs: 1500,
    clients: 4,
    sharedClients: 2,
    latencyMs: 5,
    idleMs: 1,
    samples: 3,
  });
  assert.equal(result.exitCode, 0);
  assert.equal(result.errors, 0);
  assert.equal(result.wrongAnswers, 0);
  // Every client starts a turn before the deadline, so each of the 4 finished at least one.
  assert.ok(result.turns >= 4, `${result.turns} turns`);
  assert.equal(Object.keys(result.rssMiB).length, 3);
  for (const [at, rssMiB] of Object.entries(result.rssMiB)) {
    assert.match(at, /^\d+(\.\d)?s$/);
    assertPositiveFinite(rssMiB, `RSS at ${at}`);
  }
  assertPositiveFinite(result.peakRssMiB, "RSS peak");
  assertPositiveFinite(result.idleRssMiB, "RSS after");
  assert.ok(result.peakRssMiB >= Math.max(...Object.values(result.rssMiB)) - 1);
});
