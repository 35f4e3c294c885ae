/**
 * Compaction in batches and off the turn's path: the turn trigger waits for AGENT_COMPACT_BATCH more turns,
 * then runs after the answer, beside newer turns, and commits only what it planned.
 */
import assert from "node:assert/strict";
import { PassThrough } from "node:stream";
import { runChat } from "../src/cli/chat.ts";
import { abortable } from "../src/abort.ts";
import { BackgroundCompactions } from "../src/session/background.ts";
import { runTurn } from "../src/agent/loop.ts";
import { planCompaction } from "../src/memory/plan.ts";
import { deterministicSummarizer, type Summarizer, type SummaryRequest } from "../src/memory/summarizer.ts";
import { parseSummary } from "../src/memory/summary.ts";
import { harness, keyOf, textSink } from "./_harness.ts";
import { httpHarness, parseSse, postMessage } from "./_http_harness.ts";

const KEY = keyOf("bg");
const input = (message: string) => ({ sessionId: "bg", userId: "u", message });
const answers = (n: number) => Array.from({ length: n }, (_, i) => ({ content: `a${i + 1}` }));

/** A summarizer that waits for `release()` (or its signal) before answering as the deterministic one. */
function gatedSummarizer() {
  const calls: SummaryRequest[] = [];
  let release!: () => void;
  const gate = new Promise<void>((resolve) => release = resolve);
  const summarizer: Summarizer = async (request, signal) => {
    calls.push(request);
    await abortable(gate, [signal]);
    return deterministicSummarizer(request, signal);
  };
  return { summarizer, calls, release };
}

/** The invariant every write keeps: turns counted = turns folded + user messages stored. */
async function assertAccounting(store: ReturnType<typeof harness>["store"]) {
  const session = (await store.get(KEY))!;
  const users = (await store.messages(KEY)).filter((m) => m.role === "user").length;
  assert.equal(session.turnCount, session.compactedTurns + users);
}

Deno.test("planCompaction() waits for the batch beyond AGENT_MAX_RAW_TURNS, then cuts back to it", () => {
  const turns = (n: number) =>
    Array.from({ length: n }, (_, i) => [
      { role: "user" as const, content: `q${i}` },
      { role: "assistant" as const, content: `a${i}` },
    ]).flat();
  const limits = { maxRawTurns: 4, compactBatch: 3, maxCtxTokens: 100_000 };
  for (let n = 1; n <= 7; n++) assert.equal(planCompaction(turns(n), limits), null, `${n} turns`);
  const plan = planCompaction(turns(8), limits)!;
  assert.equal(plan.trigger, "turns");
  assert.equal(plan.cutIndex, 8, "four whole turns go, four stay");
  assert.equal(planCompaction(turns(5), { ...limits, compactBatch: 0 })!.cutIndex, 2);
});

Deno.test("runTurn() with the default batch makes one summary call per batch of turns, after the answer", async () => {
  let calls = 0;
  const summarizer: Summarizer = (request, signal) => {
    calls++;
    return deterministicSummarizer(request, signal);
  };
  using h = harness(answers(16), { maxRawTurns: 4, summarizer }); // the batch: 2
  const seen: number[] = [];
  for (let i = 1; i <= 16; i++) {
    await runTurn(input(`turn ${i}`), h.agent, h.run);
    await h.agent.compactions.idle();
    seen.push(calls);
  }
  // Over 4 + 2 turns, back to 4: after turns 7, 10, 13 and 16.
  assert.deepEqual(seen, [0, 0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4]);
  const compacts = h.events.filter((e) => e.event === "compact");
  assert.deepEqual(compacts.map((e) => e.turn), [7, 10, 13, 16]);
  assert.ok(compacts.every((e) => e.data.background === true && e.data.ok === true && e.step === null));
  assert.ok(compacts.every((e) => e.data.turns_removed === 3));
  assert.equal((await h.store.messages(KEY)).filter((m) => m.role === "user").length, 4);
  // The model saw at most 4 + 2 turns of the past beside the current one in any request.
  const most = Math.max(...h.llm.requests.map((r) => r.messages.filter((m) => m.role === "user").length));
  assert.equal(most, 7);
  await assertAccounting(h.store);
});

Deno.test("runTurn() returns its answer before the summary is asked for, and the compaction is its run's", async () => {
  const gated = gatedSummarizer();
  using h = harness(answers(3), { maxRawTurns: 1, compactBatch: 0, summarizer: gated.summarizer });
  await runTurn(input("one"), h.agent, h.run);
  const result = await runTurn(input("two"), h.agent, h.run);
  assert.equal(result.answer, "a2");
  assert.equal(gated.calls.length, 0, "nothing is summarized on the turn's path");
  assert.equal(h.events.at(-1)!.event, "run_end");
  // The turn is answered and stored; the compaction is still to come.
  assert.equal((await h.store.messages(KEY)).length, 4);
  await new Promise((resolve) => setTimeout(resolve, 0));
  assert.equal(gated.calls.length, 1, "it starts once the answer is out");
  assert.equal(h.agent.compactions.running, 1);
  gated.release();
  await h.agent.compactions.idle();
  const compact = h.events.at(-1)!;
  assert.equal(compact.event, "compact");
  assert.equal(compact.run_id, result.runId);
  assert.equal(compact.turn, 2);
  assert.equal(compact.data.background, true);
  assert.equal(compact.data.ok, true);
  assert.deepEqual((await h.store.messages(KEY)).map((m) => m.content), ["two", "a2"]);
  await assertAccounting(h.store);
});

Deno.test("a turn runs beside a background compaction, which deletes only the messages it planned", async () => {
  const gated = gatedSummarizer();
  using h = harness(answers(4), { maxRawTurns: 1, compactBatch: 0, summarizer: gated.summarizer });
  await runTurn(input("one"), h.agent, h.run);
  await runTurn(input("two"), h.agent, h.run);
  await new Promise((resolve) => setTimeout(resolve, 0));
  assert.equal(gated.calls.length, 1);
  assert.deepEqual(gated.calls[0].messages.map((m) => m.content), ["one", "a1"]);
  // A new turn while the summary is being written: not blocked, and not asked to compact again.
  const third = await runTurn(input("three"), h.agent, h.run);
  assert.equal(third.answer, "a3");
  await new Promise((resolve) => setTimeout(resolve, 0));
  assert.equal(gated.calls.length, 1, "one compaction per session at a time");
  gated.release();
  await h.agent.compactions.idle();
  assert.deepEqual((await h.store.messages(KEY)).map((m) => m.content), ["two", "a2", "three", "a3"]);
  assert.deepEqual(parseSummary((await h.store.get(KEY))!.summary)!.facts, ["User said: one"]);
  await assertAccounting(h.store);
  // The next turn, over the limit again, compacts the rest.
  await runTurn(input("four"), h.agent, h.run);
  await h.agent.compactions.idle();
  assert.deepEqual((await h.store.messages(KEY)).map((m) => m.content), ["four", "a4"]);
  await assertAccounting(h.store);
});

Deno.test("a background compaction whose summary changed meanwhile commits nothing and says why", async () => {
  const gated = gatedSummarizer();
  using h = harness(answers(2), { maxRawTurns: 1, compactBatch: 0, summarizer: gated.summarizer });
  await runTurn(input("one"), h.agent, h.run);
  await runTurn(input("two"), h.agent, h.run);
  await new Promise((resolve) => setTimeout(resolve, 0));
  // Another writer (a compaction that had to run before a model call) folds the same turn first.
  const first = (await h.store.messages(KEY)).slice(0, 2).map((m) => m.id);
  await h.store.applyCompaction(KEY, '{"facts":["written meanwhile"]}', first, 1);
  gated.release();
  await h.agent.compactions.idle();
  const compact = h.events.at(-1)!;
  assert.equal(compact.event, "compact");
  assert.equal(compact.data.ok, false);
  assert.match(String(compact.data.reason), /changed meanwhile|is not stored/);
  assert.equal((await h.store.get(KEY))!.summary, '{"facts":["written meanwhile"]}');
  assert.deepEqual((await h.store.messages(KEY)).map((m) => m.content), ["two", "a2"]);
  await assertAccounting(h.store);
});

Deno.test("a background compaction of a session deleted meanwhile stores nothing", async () => {
  const gated = gatedSummarizer();
  using h = harness(answers(2), { maxRawTurns: 1, compactBatch: 0, summarizer: gated.summarizer });
  await runTurn(input("one"), h.agent, h.run);
  await runTurn(input("two"), h.agent, h.run);
  await new Promise((resolve) => setTimeout(resolve, 0));
  assert.equal(await h.store.deleteSession(KEY), true);
  gated.release();
  await h.agent.compactions.idle();
  assert.equal(await h.store.get(KEY), null, "not brought back");
  assert.equal(h.events.at(-1)!.data.ok, false);
});

Deno.test("BackgroundCompactions.close() waits for a running compaction, or abandons it after the grace", async () => {
  for (const grace of [Infinity, 20]) {
    const gated = gatedSummarizer();
    using h = harness(answers(2), { maxRawTurns: 1, compactBatch: 0, summarizer: gated.summarizer });
    await runTurn(input("one"), h.agent, h.run);
    await runTurn(input("two"), h.agent, h.run);
    await new Promise((resolve) => setTimeout(resolve, 0));
    const closing = h.agent.compactions.close(grace);
    // Released only once close() waits on it: it waits for a compaction that ends after it was called.
    if (grace === Infinity) gated.release();
    await closing;
    assert.equal(h.agent.compactions.running, 0);
    const compact = h.events.at(-1)!;
    const contents = (await h.store.messages(KEY)).map((m) => m.content);
    if (grace === Infinity) {
      assert.equal(compact.data.ok, true, "waited for");
      assert.deepEqual(contents, ["two", "a2"]);
    } else {
      assert.equal(compact.data.ok, false, "abandoned");
      assert.match(String(compact.data.reason), /shutting down/);
      assert.deepEqual(contents, ["one", "a1", "two", "a2"], "nothing lost, nothing half-written");
      assert.equal((await h.store.get(KEY))!.summary, null);
    }
    // Closed: no more work is taken.
    assert.equal(h.agent.compactions.start(KEY, () => Promise.resolve()), false);
  }
});

Deno.test("BackgroundCompactions runs one job per session at a time and reports to its own sink", async () => {
  const seen: string[] = [];
  const compactions = new BackgroundCompactions((event) => seen.push(event.event));
  let release!: () => void;
  const gate = new Promise<void>((resolve) => release = resolve);
  let runs = 0;
  const job = async () => {
    runs++;
    await gate;
  };
  assert.equal(compactions.start(keyOf("s"), job), true);
  assert.equal(compactions.start(keyOf("s"), job), false, "the same session is busy");
  assert.equal(
    compactions.start(keyOf("s", "other-user"), job),
    true,
    "another user's session of that id is not",
  );
  assert.equal(compactions.running, 2);
  await new Promise((resolve) => setTimeout(resolve, 0));
  assert.equal(runs, 2);
  release();
  await compactions.idle();
  assert.equal(compactions.running, 0);
  assert.equal(compactions.start(keyOf("s"), job), true, "free again");
  await compactions.close();
  assert.equal(runs, 3);
  assert.deepEqual(seen, []);
});

Deno.test("over HTTP the JSON response and the SSE stream end while the compaction they started still runs", async () => {
  const gated = gatedSummarizer();
  using h = httpHarness({ compaction: { maxRawTurns: 1, compactBatch: 0, summarizer: gated.summarizer } });
  const compactions = h.deps.agent.compactions;
  try {
    assert.equal((await h.handler(postMessage("web", { message: "one" }))).status, 200);
    const json = await h.handler(postMessage("web", { message: "two" }));
    assert.equal((await json.json()).outcome, "answered");
    await new Promise((resolve) => setTimeout(resolve, 0));
    assert.equal(compactions.running, 1, "the JSON response came while its compaction waits");
    assert.equal(gated.calls.length, 1);

    const sse = await h.handler(postMessage("web", { message: "three" }, { accept: "text/event-stream" }));
    const frames = parseSse(await sse.text());
    assert.equal(frames.at(-1)!.event, "run_end");
    assert.ok(!frames.some((f) => f.event === "compact"), "the stream carries no background event");
    assert.equal(compactions.running, 1, "the stream ended while the compaction still waits");
  } finally {
    gated.release();
    await compactions.close();
  }
  const stored = await h.store.messages(keyOf("web", "local"));
  assert.deepEqual(stored.filter((m) => m.role === "user").map((m) => m.content), ["two", "three"]);
  const trace = Deno.readTextFileSync(h.tracePath).trim().split("\n").map((line) => JSON.parse(line));
  const compact = trace.filter((e) => e.event === "compact");
  assert.equal(compact.length, 1);
  assert.equal(compact[0].turn, 2);
  assert.equal(compact[0].data.background, true);
});

Deno.test("the piped REPL answers every line while a compaction it started still waits, and shows none", async () => {
  const gated = gatedSummarizer();
  using h = harness(answers(3), { maxRawTurns: 1, compactBatch: 0, summarizer: gated.summarizer });
  const input = new PassThrough();
  const [output, status] = [textSink(), textSink()];
  const chat = runChat({
    sessionId: "bg",
    userId: "u",
    deps: h.agent,
    store: h.store,
    emit: h.run.emit,
    input,
    output: output.stream,
    status: status.stream,
    interactive: false,
  });
  input.end("one\ntwo\nthree\n");
  try {
    assert.equal(await chat, 0);
    assert.match(output.text(), /a1[\s\S]*a2[\s\S]*a3/);
    assert.equal(h.agent.compactions.running, 1, "still waiting for its summary");
    assert.doesNotMatch(output.text() + status.text(), /compact/);
  } finally {
    gated.release();
    await h.agent.compactions.close();
  }
  assert.equal(h.events.filter((e) => e.event === "compact" && e.data.ok === true).length, 1);
  await assertAccounting(h.store);
});
