/**
 * `POST /v1/responses` through the Vercel AI SDK's default OpenAI provider (`@ai-sdk/openai`, in a child
 * process, see `tests/fixtures/ai_sdk_responses_client.ts`) against a real server on 127.0.0.1.
 */
import assert from "node:assert/strict";
import { keyOf } from "./_harness.ts";
import { httpHarness, withServer } from "./_http_harness.ts";
import { runAiSdkClient } from "./_openai_client.ts";

Deno.test("the AI SDK's openai provider gets generateText and streamText from /v1/responses, chains by id and by messages", async () => {
  using h = httpHarness();
  await withServer(h, async ({ url }) => {
    const [generated, streamed, followed] = await runAiSdkClient("ai_sdk_responses_client", [
      url,
      "no-auth-configured",
      "what is 12*7?",
    ]);
    assert.equal(generated.text, "The answer is 84.");
    assert.equal(generated.finishReason, "stop");
    // The server's calculator call, shown as done on the server: no call the client must run.
    assert.deepEqual(generated.toolCalls, [
      { name: "mcp.calculator", input: { expression: "12*7" }, providerExecuted: true },
    ]);
    assert.deepEqual(generated.toolResults, [{
      type: "call",
      serverLabel: "mini-agent",
      name: "calculator",
      arguments: '{"expression":"12*7"}',
      output: '{"expression":"12*7","result":84}',
    }]);
    assert.deepEqual(generated.usage, { input: 20, output: 4 });
    assert.match(String(generated.responseId), /^resp_/);
    assert.equal(streamed.text, "echo: and again");
    assert.ok(Number(streamed.deltas) >= 1);
    assert.equal(followed.text, "echo: thanks");
    const sessions = await h.store.listSessions("local");
    assert.equal(sessions.length, 2, "previousResponseId continued the first response's session");
    const histories = await Promise.all(
      sessions.map(async (s) =>
        (await h.store.messages(keyOf(s.id, "local"))).filter((m) => m.role !== "tool" && m.content !== null)
          .map((m) => m.content)
      ),
    );
    assert.deepEqual(histories.sort(), [
      ["what is 12*7?", "The answer is 84.", "and again", "echo: and again"],
      ["what is 12*7?", "The answer is 84.", "thanks", "echo: thanks"],
    ]);
  });
});
