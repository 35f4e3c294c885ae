/**
 * Live tests against the configured provider, in the wire format of LLM_API (chat, anthropic with
 * ANTHROPIC_API_KEY, responses). They run only with RUN_LIVE_TESTS=1 and the format's key set (and --allow-net
 * for the provider's host); otherwise they are ignored and say why.
 */
import { BackgroundCompactions } from "../src/session/background.ts";
import assert from "node:assert/strict";
import { apiKeySetting, loadConfig } from "../src/config.ts";
import { runTurn } from "../src/agent/loop.ts";
import { createLlmFromConfig } from "../src/llm/client.ts";
import { SqliteStore } from "../src/store/sqlite.ts";
import { createLlmSummarizer } from "../src/memory/summarizer.ts";
import { parseSummary, parseSummaryPatch } from "../src/memory/summary.ts";
import { keyOf, realTools } from "./_harness.ts";

const config = loadConfig({
  RUN_LIVE_TESTS: Deno.env.get("RUN_LIVE_TESTS"),
  OPENAI_API_KEY: Deno.env.get("OPENAI_API_KEY"),
  OPENAI_BASE_URL: Deno.env.get("OPENAI_BASE_URL"),
  MODEL: Deno.env.get("MODEL"),
  LLM_API: Deno.env.get("LLM_API"),
  ANTHROPIC_API_KEY: Deno.env.get("ANTHROPIC_API_KEY"),
  ANTHROPIC_BASE_URL: Deno.env.get("ANTHROPIC_BASE_URL"),
  AGENT_THINKING_BUDGET: Deno.env.get("AGENT_THINKING_BUDGET"),
  AGENT_REASONING_EFFORT: Deno.env.get("AGENT_REASONING_EFFORT"),
});
const reason = !config.runLiveTests
  ? "RUN_LIVE_TESTS is not 1"
  : config.apiKey === ""
  ? `${apiKeySetting(config.api)} is empty`
  : null;
if (reason !== null) console.log(`live tests ignored: ${reason}`);

/** Live runs report nowhere: the assertions read the results and the store. */
const quiet = { emit: () => {} };

function liveDeps(store: SqliteStore, maxRawTurns = 20) {
  const llm = createLlmFromConfig(config);
  return {
    store,
    llm,
    tools: realTools(store),
    maxSteps: 8,
    summarizer: createLlmSummarizer(llm),
    maxRawTurns,
    compactBatch: 0,
    compactions: new BackgroundCompactions(() => {}),
    maxCtxTokens: 6000,
  };
}

Deno.test({
  name: "live: the model calls the calculator by itself and answers 66",
  ignore: reason !== null,
  async fn() {
    const store = new SqliteStore(":memory:");
    try {
      const result = await runTurn(
        { sessionId: "live", userId: "live", message: "Use the calculator: what is 1234 * 7 - 8572?" },
        liveDeps(store),
        quiet,
      );
      assert.equal(result.outcome, "answered", result.answer);
      assert.ok(result.toolCalls.some((c) => c.name === "calculator" && c.ok), "the calculator was used");
      assert.match(result.answer, /\b66\b/);
    } finally {
      await store.close();
    }
  },
});

Deno.test({
  name: "live: a todo added in one turn is recalled in a follow-up",
  ignore: reason !== null,
  async fn() {
    const store = new SqliteStore(":memory:");
    try {
      const deps = liveDeps(store);
      const id = { sessionId: "live-todo", userId: "live" };
      await runTurn({ ...id, message: "Please add a todo: renew my passport before March." }, deps, quiet);
      assert.equal((await store.listTodos(keyOf("live-todo", "live"))).length, 1, "the todo tool stored it");
      const result = await runTurn(
        { ...id, message: "Which official document did I say I must renew?" },
        deps,
        quiet,
      );
      assert.match(result.answer, /passport/i);
    } finally {
      await store.close();
    }
  },
});

Deno.test({
  name: "live: a compaction with the real model yields a valid summary that answers a follow-up",
  ignore: reason !== null,
  async fn() {
    const store = new SqliteStore(":memory:");
    try {
      const deps = liveDeps(store, 2);
      const id = { sessionId: "live-compact", userId: "live" };
      for (const message of ["My favourite colour is teal.", "I am planning a trip to Lisbon.", "Say hi."]) {
        await runTurn({ ...id, message }, deps, quiet);
      }
      await deps.compactions.idle();
      const summary = parseSummary((await store.get(keyOf("live-compact", "live")))!.summary);
      assert.ok(summary !== null, "a summary was stored");
      parseSummaryPatch(
        JSON.stringify({
          goals: summary.goals,
          facts: summary.facts,
          todos: summary.todos,
          unresolved: summary.unresolved,
        }),
      );
      assert.ok(
        !(await store.messages(keyOf("live-compact", "live"))).some((m) => m.content?.includes("teal")),
      );
      const result = await runTurn({ ...id, message: "What is my favourite colour?" }, deps, quiet);
      assert.match(result.answer, /teal/i);
    } finally {
      await store.close();
    }
  },
});

for (const stream of [false, true]) {
  Deno.test({
    name: `live (${
      stream ? "streamed" : "whole"
    }): two tool turns in the configured wire format, the second reading the first`,
    ignore: reason !== null,
    async fn() {
      const store = new SqliteStore(":memory:");
      try {
        const deps = { ...liveDeps(store), llm: createLlmFromConfig(config, { stream }) };
        const ask = (message: string) =>
          runTurn({ sessionId: "live-wire", userId: "live", message }, deps, quiet);
        const first = await ask("Use the calculator: what is 17 * 23?");
        assert.equal(first.outcome, "answered", first.answer);
        assert.match(first.answer, /\b391\b/);
        const second = await ask("Use the calculator to add 9 to the previous result.");
        assert.equal(second.outcome, "answered", second.answer);
        assert.match(second.answer, /\b400\b/);
      } finally {
        await store.close();
      }
    },
  });
}
