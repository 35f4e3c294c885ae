/**
 * The user's memory through turns: a fact compacted in one session is recalled into the [RUNTIME CONTEXT]
 * block of the same user's next session, never another user's; the block is byte-stable while nothing
 * changes; recall shrinks to fit the token budget before raw turns are cut; the trace says what was written
 * and recalled; the `remember` and `forget` tools work on the calling user's items only;
 * AGENT_USER_MEMORY=0 turns it all off.
 */
import assert from "node:assert/strict";
import { runTurn } from "../src/agent/loop.ts";
import { RUNTIME_CONTEXT_HEADER } from "../src/memory/summary.ts";
import { estimateRequestTokens } from "../src/memory/plan.ts";
import type { Summarizer } from "../src/memory/summarizer.ts";
import type { ScriptedRequest } from "../src/llm/scripted.ts";
import { SqliteStore } from "../src/store/sqlite.ts";
import { createMemoryTools } from "../src/tools/memory.ts";
import { type Harness, harness, steppingClock } from "./_harness.ts";

const MEMORY = { items: 200, recall: 5 };
const answer = (text: string) => ({ content: text });

/** The [RUNTIME CONTEXT] block's JSON of a request, or null without one. */
function contextOf(request: ScriptedRequest): Record<string, unknown> | null {
  const block = request.messages.find((m) =>
    m.role === "system" && m.content?.startsWith(RUNTIME_CONTEXT_HEADER)
  );
  return block === undefined ? null : JSON.parse(block.content!.split("\n").at(-1)!);
}

function blockText(request: ScriptedRequest): string | null {
  return request.messages.find((m) => m.content?.startsWith(RUNTIME_CONTEXT_HEADER))?.content ?? null;
}

async function turn(h: Harness, userId: string, sessionId: string, message: string): Promise<void> {
  await runTurn({ userId, sessionId, message }, h.agent, h.run);
  await h.agent.compactions.idle();
}

/** Alice tells a fact in window w1; a second turn compacts the first into the summary and her memory. */
async function tellAndCompact(h: Harness): Promise<void> {
  await turn(h, "alice", "w1", "My dog is called Rex.");
  await turn(h, "alice", "w1", "Thanks, that is all.");
}

Deno.test("runTurn() recalls a fact compacted in one window into the same user's fresh window, not another user's", async () => {
  using h = harness([answer("a1"), answer("a2"), answer("Rex."), answer("No idea.")], {
    maxRawTurns: 1,
    compactBatch: 0,
    userMemory: MEMORY,
  });
  await tellAndCompact(h);
  const write = h.events.find((e) => e.event === "memory_write")!;
  assert.equal(write.data.source, "compaction");
  assert.equal(write.data.added, 1);
  assert.equal(write.data.background, true);
  const [item] = await h.store.listMemory("alice");
  assert.equal(item.text, "User said: My dog is called Rex.");
  assert.equal(item.sourceSession, "w1");

  await turn(h, "alice", "w3", "What is my dog called?");
  await turn(h, "bob", "w3", "What is my dog called?");
  const [, , alice, bob] = h.llm.requests;
  assert.deepEqual(contextOf(alice), { user_memory: [{ id: item.id, text: item.text }] });
  assert.equal(contextOf(bob), null, "bob's window gets nothing of alice's");
  const recalls = h.events.filter((e) => e.event === "memory_recall");
  assert.equal(recalls.length, 1);
  assert.equal(recalls[0].user_id, "alice");
  assert.deepEqual(recalls[0].data.ids, [item.id]);
  assert.equal(typeof (recalls[0].data.scores as number[])[0], "number");
  assert.ok(!JSON.stringify(recalls[0].data).includes("Rex"), "the trace carries no item text");
  assert.equal((await h.store.listMemory("alice"))[0].useCount, 1);
});

Deno.test("runTurn() keeps the block byte-stable across the model calls of a turn and while nothing changes", async () => {
  using h = harness([
    answer("a1"),
    answer("a2"),
    { toolCalls: [{ name: "calculator", arguments: { expression: "2+2" } }] },
    answer("Rex, and 4."),
    answer("Still Rex."),
  ], { maxRawTurns: 1, compactBatch: 0, userMemory: MEMORY });
  await tellAndCompact(h);
  await h.store.remember("alice", { items: ["Has a cat named Tom", "Likes dog shows"], limit: 200 });
  await turn(h, "alice", "w3", "What is my dog called, and what is 2+2?");
  await turn(h, "alice", "w3", "What is my dog called, and what is 2+2?");
  const [first, second, third] = h.llm.requests.slice(2).map(blockText);
  assert.ok(first !== null);
  assert.equal(second, first, "the tool step's request carries the same bytes");
  assert.equal(third, first, "the next turn's too");
  const ids = (contextOf(h.llm.requests[2])!.user_memory as { id: number }[]).map((i) => i.id);
  assert.deepEqual(ids, [...ids].sort((a, b) => a - b), "in the order of their ids");
  assert.equal(ids.length, 2, "the cat matches no word");
});

Deno.test("runTurn() recalls at most AGENT_USER_MEMORY_RECALL items, the most relevant", async () => {
  using h = harness([answer("ok")], { userMemory: { items: 200, recall: 2 } });
  await h.store.remember("alice", {
    items: ["Dog Rex likes the dog park", "Has a dog", "Dog food brand is Acme", "Lives in Oslo"],
    limit: 200,
  });
  await turn(h, "alice", "w1", "Which dog park does my dog Rex like?");
  const texts = (contextOf(h.llm.requests[0])!.user_memory as { text: string }[]).map((i) => i.text);
  assert.deepEqual(texts, ["Dog Rex likes the dog park"].concat(texts.slice(1)));
  assert.equal(texts.length, 2);
});

Deno.test("runTurn() shrinks recall to fit the token budget before it cuts raw turns", async () => {
  const items = Array.from(
    { length: 5 },
    (_, i) => `Rex fact number ${i}: ${"the dog likes long walks ".repeat(6)}`,
  );
  const script = [answer("a"), answer("b")];
  // The request without memory, measured, gets room for about two items.
  using probe = harness([answer("a")]);
  await turn(probe, "alice", "w1", "Tell me about Rex.");
  const base = estimateRequestTokens(probe.llm.requests[0].messages, probe.llm.requests[0].tools);
  using h = harness(script, { maxCtxTokens: base + 130, userMemory: MEMORY });
  await h.store.remember("alice", { items, limit: 200 });
  await turn(h, "alice", "w1", "Tell me about Rex.");
  const carried = contextOf(h.llm.requests[0])!.user_memory as unknown[];
  assert.ok(carried.length >= 1 && carried.length < 5, `carried ${carried.length} of 5`);
  const recall = h.events.find((e) => e.event === "memory_recall")!;
  assert.equal(recall.data.dropped, 5 - carried.length);
  assert.ok(!h.events.some((e) => e.event === "compact"), "no raw turn was cut");
});

Deno.test("runTurn() writes nothing to the user's memory when the compaction fails", async () => {
  const failing: Summarizer = () => Promise.reject(new Error("summarizer down"));
  using h = harness([answer("a1"), answer("a2")], {
    maxRawTurns: 1,
    compactBatch: 0,
    userMemory: MEMORY,
    summarizer: failing,
  });
  await tellAndCompact(h);
  const compact = h.events.find((e) => e.event === "compact")!;
  assert.equal(compact.data.ok, false);
  assert.deepEqual(await h.store.listMemory("alice"), []);
  assert.ok(!h.events.some((e) => e.event === "memory_write"));
});

Deno.test("runTurn() with the user's memory off writes and recalls nothing", async () => {
  using h = harness([answer("a1"), answer("a2"), answer("a3")], { maxRawTurns: 1, compactBatch: 0 });
  await h.store.remember("alice", { items: ["My dog is called Rex"], limit: 200 });
  await tellAndCompact(h);
  await turn(h, "alice", "w3", "What is my dog called?");
  assert.equal((await h.store.listMemory("alice")).length, 1, "only what was there");
  assert.equal(contextOf(h.llm.requests[2]), null);
  assert.ok(!h.events.some((e) => e.event === "memory_recall" || e.event === "memory_write"));
});

Deno.test("remember and forget keep and erase the calling user's items, each traced as memory_write", async () => {
  const store = new SqliteStore(":memory:", { now: steppingClock() });
  using h = harness([
    { toolCalls: [{ name: "remember", arguments: { text: "  Prefers  tea\nto coffee " } }] },
    answer("Noted."),
    // A repeat (a call run again after a crash, say) folds into the same item.
    { toolCalls: [{ name: "remember", arguments: { text: "prefers tea to coffee" } }] },
    answer("Noted again."),
    answer("Tea."),
    (request) => ({ toolCalls: [{ name: "forget", arguments: { id: firstId(request) } }] }),
    answer("Forgotten."),
    { toolCalls: [{ name: "forget", arguments: { id: 999 } }] },
    answer("Nothing to forget."),
  ], { store, userMemory: MEMORY, extraTools: createMemoryTools(store, 200) });
  await turn(h, "alice", "w1", "Remember that I prefer tea to coffee.");
  await turn(h, "alice", "w1", "Remember it, really.");
  const items = await store.listMemory("alice");
  assert.deepEqual(items.map((i) => [i.text, i.sourceSession]), [["Prefers tea to coffee", "w1"]]);
  const writes = h.events.filter((e) => e.event === "memory_write");
  assert.deepEqual(writes.map((e) => [e.data.source, e.data.added, e.data.ids]), [
    ["remember", 1, [items[0].id]],
    ["remember", 0, [items[0].id]],
  ]);
  assert.deepEqual(await store.listMemory("bob"), []);

  await turn(h, "alice", "w2", "Do I prefer tea or coffee?");
  await turn(h, "alice", "w2", "Forget that I prefer tea.");
  assert.deepEqual(await store.listMemory("alice"), []);
  assert.equal(h.events.filter((e) => e.event === "memory_write").at(-1)!.data.source, "forget");
  await turn(h, "alice", "w2", "Forget item 999.");
  const result = h.events.filter((e) => e.event === "tool_result").at(-1)!;
  assert.equal(result.data.ok, false);
  assert.match(String(result.data.error), /Cannot forget memory item 999: the user has no such item/);
  store.close();
});

Deno.test("forget cannot erase another user's item", async () => {
  const store = new SqliteStore(":memory:", { now: steppingClock() });
  const [, forget] = createMemoryTools(store, 200);
  const { ids: [id] } = await store.remember("alice", { items: ["Alice's secret"], limit: 200 });
  await assert.rejects(
    async () => await forget.handler({ id }, { userId: "bob", sessionId: "s" }),
    /no such item/,
  );
  assert.equal((await store.listMemory("alice")).length, 1);
  store.close();
});

/** The id of the first item the request's [RUNTIME CONTEXT] block recalled. */
function firstId(request: ScriptedRequest): number {
  return (contextOf(request)!.user_memory as { id: number }[])[0].id;
}
