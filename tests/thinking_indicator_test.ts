/**
 * The "reasoning…" indicator (AGENT_SHOW_THINKING): while a thinking provider's reasoning streams in, the
 * client reports that it arrives (never its text), chat's waiting line says "reasoning…" and the sessions
 * API's SSE stream sends one `reasoning` event per step; without the setting nothing changes. The text of the
 * reasoning reaches none of them.
 */
import assert from "node:assert/strict";
import { PassThrough } from "node:stream";
import { runChat } from "../src/cli/chat.ts";
import { loadConfig } from "../src/config.ts";
import { createLlmFromConfig, HttpLLM } from "../src/llm/client.ts";
import type { Message } from "../src/types.ts";
import { httpHarness } from "./_http_harness.ts";
import { harness, textSink } from "./_harness.ts";
import { type Dialect, thinkingProvider, THOUGHT } from "./_thinking_providers.ts";

const MODEL = "thinker-v4-pro";
const QUESTION: Message[] = [{ role: "user", content: "what is 6*7?" }];

function client(provider: { baseUrl: string; fetch: typeof fetch }, reasoningProgress: boolean) {
  return new HttpLLM({
    baseUrl: provider.baseUrl,
    model: MODEL,
    stream: true,
    reasoningProgress,
    retries: 0,
    fetch: provider.fetch,
  });
}

/** Strips ANSI escapes, so assertions read what a person sees. */
function plain(text: string): string {
  // deno-lint-ignore no-control-regex
  return text.replace(/\x1b\[[0-9;]*[A-Za-z]/g, "");
}

Deno.test("a streamed reply reports each chunk of reasoning as it arrives, before the answer's text and without it", async () => {
  // DeepSeek's reasoning_content comes in two chunks, OpenRouter's reasoning_details in three; Gemini sends none.
  const expected: [Dialect, number][] = [["deepseek", 2], ["openrouter", 3], ["gemini", 0]];
  for (const [dialect, chunks] of expected) {
    const provider = thinkingProvider(dialect);
    const seen: string[] = [];
    const reply = await client(provider, true).chat([{ role: "user", content: "hello there" }], {
      onReasoning: (...args: unknown[]) => seen.push(`reasoning(${args.length})`),
      onDelta: () => seen.push("text"),
    });
    assert.match(reply.content ?? "", /echo: hello there/);
    const reasoning = seen.filter((item) => item !== "text");
    assert.deepEqual(reasoning, Array(chunks).fill("reasoning(0)"), `${dialect}: no argument, one per chunk`);
    assert.equal(seen.lastIndexOf("reasoning(0)") < seen.indexOf("text"), true, `${dialect}: ${seen}`);
  }
});

Deno.test("a client not told to report reasoning (the default) never calls onReasoning", async () => {
  let calls = 0;
  const provider = thinkingProvider("deepseek");
  await client(provider, false).chat(QUESTION, { onReasoning: () => calls++ });
  const config = loadConfig({ OPENAI_API_KEY: "sk-test", OPENAI_BASE_URL: provider.baseUrl });
  assert.equal(config.showThinking, false);
  await createLlmFromConfig(config, { stream: true, fetch: provider.fetch }).chat(QUESTION, {
    onReasoning: () => calls++,
  });
  assert.equal(calls, 0);
});

Deno.test("AGENT_SHOW_THINKING=1 makes the configured client report reasoning; a bad value names the setting", async () => {
  const provider = thinkingProvider("kimi");
  const env = { OPENAI_API_KEY: "sk-test", OPENAI_BASE_URL: provider.baseUrl, AGENT_SHOW_THINKING: "1" };
  const config = loadConfig(env);
  assert.equal(config.showThinking, true);
  let calls = 0;
  await createLlmFromConfig(config, { stream: true, fetch: provider.fetch }).chat(QUESTION, {
    onReasoning: () => calls++,
  });
  assert.equal(calls, 2);
  assert.throws(() => loadConfig({ ...env, AGENT_SHOW_THINKING: "sometimes" }), /AGENT_SHOW_THINKING/);
});

Deno.test("chat: while reasoning streams in, the waiting line says 'reasoning…', never the reasoning itself", async () => {
  for (const show of [true, false]) {
    const provider = thinkingProvider("deepseek");
    using h = harness([]);
    const input = new PassThrough();
    const output = textSink();
    const status = textSink();
    const chat = runChat({
      sessionId: "c",
      userId: "u",
      deps: { ...h.agent, llm: client(provider, show) },
      store: h.store,
      emit: h.run.emit,
      input,
      output: output.stream,
      status: status.stream,
      interactive: true,
    });
    input.write("what is 6*7?\r");
    input.write("/exit\r");
    assert.equal(await chat, 0, status.text());
    const shown = plain(output.text() + status.text());
    assert.match(shown, /The answer is 42\./);
    assert.equal(/reasoning…/.test(shown), show, shown);
    assert.ok(!shown.includes(THOUGHT), "no reasoning text on screen");
  }
});

Deno.test("SSE: one `reasoning` event per step whose reasoning streams, before that step's calls and text; none of its text", async () => {
  using h = httpHarness();
  const provider = thinkingProvider("openrouter");
  h.deps.agent.llm = client(provider, true);
  const response = await h.handler(
    new Request("http://agent.test/v1/sessions/sse/messages", {
      method: "POST",
      headers: { "content-type": "application/json", accept: "text/event-stream" },
      body: JSON.stringify({ message: "what is 6*7?" }),
    }),
  );
  assert.equal(response.status, 200);
  const body = await response.text();
  assert.ok(!body.includes(THOUGHT), "no reasoning text in the stream");
  const frames = body.split("\n\n").filter((frame) => frame.includes("event: ")).map((frame) => ({
    event: /event: (\S+)/.exec(frame)![1],
    data: JSON.parse(/data: (.*)/.exec(frame)![1]),
  }));
  const reasoning = frames.filter((frame) => frame.event === "reasoning");
  assert.deepEqual(reasoning.map((frame) => frame.data), [{ step: 0 }, { step: 1 }]);
  const order = frames.map((frame) => frame.event).filter((e) =>
    ["reasoning", "tool_call", "delta"].includes(e)
  );
  assert.deepEqual(order.slice(0, 3), ["reasoning", "tool_call", "reasoning"], order.join());
  assert.equal(order.slice(3).every((event) => event === "delta"), true, order.join());
  h.tracer.close();
  const trace = Deno.readTextFileSync(h.tracePath);
  assert.ok(!trace.includes(THOUGHT) && !trace.includes('"reasoning"'), "the trace has neither");
});
