/**
 * Live tests against the configured provider. They run only with RUN_LIVE_TESTS=1 and OPENAI_API_KEY set
 * (and --allow-net for the provider's host); otherwise they are ignored and say why.
 */
import assert from "node:assert/strict";
import { loadConfig } from "../src/config.ts";
import { runTurn } from "../src/loop.ts";
import { OpenAICompatibleLLM } from "../src/llm/openai.ts";
import { SessionStore } from "../src/store.ts";
import { createLlmSummarizer } from "../src/summarizer.ts";
import { realTools } from "./_harness.ts";

const config = loadConfig({
  RUN_LIVE_TESTS: Deno.env.get("RUN_LIVE_TESTS"),
  OPENAI_API_KEY: Deno.env.get("OPENAI_API_KEY"),
  OPENAI_BASE_URL: Deno.env.get("OPENAI_BASE_URL"),
  MODEL: Deno.env.get("MODEL"),
});
const reason = !config.runLiveTests
  ? "RUN_LIVE_TESTS is not 1"
  : config.apiKey === ""
  ? "OPENAI_API_KEY is empty"
  : null;
if (reason !== null) console.log(`live tests ignored: ${reason}`);

Deno.test({
  name: "live: the model calls the calculator by itself and answers 66",
  ignore: reason !== null,
  async fn() {
    const store = new SessionStore(":memory:");
    try {
      const llm = new OpenAICompatibleLLM({
        baseUrl: config.baseUrl,
        apiKey: config.apiKey,
        model: config.model,
      });
      const result = await runTurn(
        { sessionId: "live", userId: "live", message: "Use the calculator: what is 1234 * 7 - 8572?" },
        {
          store,
          llm,
          tools: realTools(store),
          emit: () => {},
          maxSteps: 8,
          summarizer: createLlmSummarizer(llm),
          maxRawTurns: 20,
          maxCtxTokens: 6000,
        },
      );
      assert.equal(result.outcome, "answered", result.answer);
      assert.ok(result.toolCalls.some((c) => c.name === "calculator" && c.ok), "the calculator was used");
      assert.match(result.answer, /\b66\b/);
    } finally {
      store.close();
    }
  },
});
