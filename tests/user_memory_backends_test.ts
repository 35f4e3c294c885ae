/**
 * The user's memory through real turns on SQLite and PostgreSQL: a fact compacted in one window is recalled,
 * byte-stable, into the same user's fresh window and never another user's with the same words; recall shrinks
 * to the token budget before a raw turn is cut.
 */
import assert from "node:assert/strict";
import { type Agent, runTurn } from "../src/agent/loop.ts";
import type { TracedEvent } from "../src/events.ts";
import { ScriptedLLM, type ScriptedRequest, type ScriptStep } from "../src/llm/scripted.ts";
import { BackgroundCompactions } from "../src/session/background.ts";
import { estimateRequestTokens } from "../src/memory/plan.ts";
import { deterministicSummarizer } from "../src/memory/summarizer.ts";
import { RUNTIME_CONTEXT_HEADER } from "../src/memory/summary.ts";
import type { SessionStore } from "../src/store/store.ts";
import { createBuiltinTools } from "../src/tools/builtin.ts";
import { DOCS, steppingClock } from "./_harness.ts";
import { storeTest } from "./_store_backends.ts";

const MEMORY = { items: 200, recall: 5 };

/** An agent on `store` around a scripted model, its events collected. */
function agentOn(store: SessionStore, script: ScriptStep[], maxCtxTokens = 6000) {
  const llm = new ScriptedLLM(script);
  const events: TracedEvent[] = [];
  const emit = (event: TracedEvent) => void events.push(event);
  const agent: Agent = {
    llm,
    tools: createBuiltinTools(store, { docsDir: DOCS }),
    maxSteps: 8,
    summarizer: deterministicSummarizer,
    maxRawTurns: 1,
    compactBatch: 0,
    compactions: new BackgroundCompactions(emit),
    maxCtxTokens,
    userMemory: MEMORY,
    now: steppingClock(),
  };
  const turn = async (userId: string, sessionId: string, message: string) => {
    await runTurn({ userId, sessionId, message }, agent, { emit, store });
    await agent.compactions.idle();
  };
  return { llm, events, turn };
}

function block(request: ScriptedRequest): string | null {
  return request.messages.find((m) => m.content?.startsWith(RUNTIME_CONTEXT_HEADER))?.content ?? null;
}

storeTest(
  "$Store: a fact compacted in window 1 reaches the same user's fresh window, byte-stable, and not another user's",
  async (db) => {
    const store = await db.open({ now: steppingClock() });
    try {
      const { llm, events, turn } = agentOn(store, [
        { content: "a1" },
        { content: "a2" },
        { toolCalls: [{ name: "calculator", arguments: { expression: "2+2" } }] },
        { content: "Rex, and 4." },
        { content: "No idea." },
      ]);
      await turn("alice", "w1", "My dog is called Rex.");
      await turn("alice", "w1", "Thanks.");
      assert.ok(events.some((e) => e.event === "memory_write" && e.data.source === "compaction"));
      await turn("alice", "w3", "What is my dog called, and 2+2?");
      await turn("bob", "w3", "What is my dog called, and 2+2?");
      const [first, second, bobs] = llm.requests.slice(2).map(block);
      assert.match(first ?? "", /"user_memory":\[\{"id":\d+,"text":"User said: My dog is called Rex\."\}\]/);
      assert.equal(second, first, "the turn's second call carries the same bytes");
      assert.equal(bobs, null);
    } finally {
      await store.close();
    }
  },
);

storeTest("$Store: recall shrinks to the token budget before a raw turn is cut", async (db) => {
  const store = await db.open({ now: steppingClock() });
  try {
    const probe = agentOn(store, [{ content: "a" }]);
    await probe.turn("carol", "probe", "Tell me about Rex.");
    const bare = estimateRequestTokens(probe.llm.requests[0].messages, probe.llm.requests[0].tools);
    const items = Array.from(
      { length: 5 },
      (_, i) => `Rex fact ${i}: ${"the dog likes long walks ".repeat(6)}`,
    );
    await store.remember("alice", { items, limit: 200 });
    const { llm, events, turn } = agentOn(store, [{ content: "b" }], bare + 130);
    await turn("alice", "w1", "Tell me about Rex.");
    const carried = JSON.parse(block(llm.requests[0])!.split("\n").at(-1)!).user_memory as unknown[];
    assert.ok(carried.length >= 1 && carried.length < 5, `carried ${carried.length} of 5`);
    assert.equal(events.find((e) => e.event === "memory_recall")?.data.dropped, 5 - carried.length);
    assert.ok(!events.some((e) => e.event === "compact"), "no raw turn was cut");
  } finally {
    await store.close();
  }
});
