/** Piped chat (stdin not a terminal): one answer line per question, streamed or not. */
import assert from "node:assert/strict";
import { PassThrough } from "node:stream";
import { runChat } from "../src/cli/chat.ts";
import { readDialects, replayProvider } from "./_dialects.ts";
import { childEnv, harness, runProcess, tempDir, textSink } from "./_harness.ts";

Deno.test("piped chat prints one line per question when text streams before tool calls", async () => {
  using h = harness([
    {
      content: "Let me compute that.\n\n",
      deltas: ["Let me ", "compute that.\n", "\n"],
      toolCalls: [{ name: "calculator", arguments: { expression: "6*7" } }],
    },
    { content: "6*7 is 42.", deltas: ["6*7 ", "is 42."] },
    { content: "Nothing to compute.", deltas: ["Nothing ", "to compute."] },
  ]);
  const input = new PassThrough();
  const output = textSink();
  const status = textSink();
  const chat = runChat({
    sessionId: "piped",
    userId: "u",
    deps: h.agent,
    emit: h.run.emit,
    input,
    output: output.stream,
    status: status.stream,
    interactive: false,
  });
  input.end("what is 6*7?\nand now?\n");
  assert.equal(await chat, 0);
  assert.equal(output.text(), "Let me compute that. 6*7 is 42.\nNothing to compute.\n");
  assert.equal(status.text(), "");
});

Deno.test("deno task chat piped prints one answer line per question from a provider that writes before its tool calls", async () => {
  const anthropic = readDialects().find((dialect) => dialect.name === "anthropic")!;
  const { call_text: before, answer } = anthropic.expect;
  for (const stream of ["1", "0"]) {
    using dir = tempDir();
    // Two questions, each a tool call then its answer.
    const provider = replayProvider([...anthropic.replies, ...anthropic.replies]);
    try {
      const env = childEnv(dir.path, { OPENAI_BASE_URL: provider.url, AGENT_STREAM: stream });
      const result = await runProcess("deno", ["task", "--quiet", "chat"], {
        env,
        stdin: "what are 6*7 and 2+3?\nand again?\n",
        clearEnv: true,
      });
      assert.equal(result.code, 0, result.stderr);
      const line = stream === "1" ? `${before} ${answer}` : answer;
      assert.equal(result.stdout, `${line}\n${line}\n`, `AGENT_STREAM=${stream}`);
      assert.equal(provider.requests.length, 4);
    } finally {
      await provider.close();
    }
  }
});
