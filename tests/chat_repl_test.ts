/** The interactive REPL, driven through in-memory streams as a terminal would drive it. */
import assert from "node:assert/strict";
import { PassThrough } from "node:stream";
import { runChat } from "../src/cli/chat.ts";
import { LlmError } from "../src/errors.ts";
import type { ChatOptions, LLM } from "../src/llm/llm.ts";
import type { ChatReply, Message } from "../src/types.ts";
import type { Agent } from "../src/agent/loop.ts";
import { type Harness, harness, keyOf, textSink } from "./_harness.ts";

async function until(check: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 500 && !check(); i++) await new Promise((resolve) => setTimeout(resolve, 10));
  assert.ok(check(), `timed out waiting for ${what}`);
}

/** A model whose first call waits for the turn's abort (as the real client does); later calls answer. */
class HangingThenAnswering implements LLM {
  calls = 0;
  chat(_messages: Message[], options: ChatOptions = {}): Promise<ChatReply> {
    if (this.calls++ > 0) {
      return Promise.resolve({ content: "second answer", toolCalls: [], usage: null, model: "m" });
    }
    return new Promise((_, reject) => {
      options.signal?.addEventListener(
        "abort",
        () => reject(new LlmError("LLM request was aborted", { kind: "aborted" })),
        { once: true },
      );
    });
  }
}

/** Strips ANSI escapes, so assertions read what a person sees. */
function plain(text: string): string {
  // deno-lint-ignore no-control-regex
  return text.replace(/\x1b\[[0-9;]*[A-Za-z]/g, "");
}

/** An interactive REPL on in-memory streams: type into `input`, read `output` and `status`. */
function startRepl(h: Harness, sessionId: string, agent: Partial<Agent> = {}) {
  const input = new PassThrough();
  const output = textSink();
  const status = textSink();
  const exit = runChat({
    sessionId,
    userId: "local",
    deps: { ...h.agent, ...agent },
    emit: h.run.emit,
    input,
    output: output.stream,
    status: status.stream,
    interactive: true,
  });
  const runEnds = () => h.events.filter((e) => e.event === "run_end").length;
  return { input, output, status, exit, runEnds };
}

Deno.test("the REPL says one line, 'cancelled', when Ctrl-C cancels a running turn", async () => {
  using h = harness([]);
  const llm = new HangingThenAnswering();
  const { input, output, status, exit: chat, runEnds } = startRepl(h, "repl-1", { llm });
  input.write("first question\r");
  await until(() => llm.calls === 1, "the model call");
  input.write("\x03"); // Ctrl-C
  await until(() => runEnds() === 1, "the cancelled turn to end");
  input.write("second question\r");
  await until(() => runEnds() === 2, "the second turn");
  input.write("/exit\r");
  assert.equal(await chat, 0);

  const shown = plain(output.text() + status.text());
  const lines = shown.split(/\r?\n|\r/).filter((line) => /cancel|abort/i.test(line));
  assert.deepEqual(lines.map((line) => line.trim()), ["cancelled"]);
  assert.match(shown, /second answer/);
});

Deno.test("the REPL's /retry answers the question of a failed turn without storing it twice", async () => {
  using h = harness([
    new LlmError("LLM request failed: HTTP 503 from provider.test", { kind: "http", status: 503 }),
    { content: "the retried answer" },
  ]);
  const { input, output, exit: chat, runEnds } = startRepl(h, "repl-2");
  input.write("/retry\r");
  await until(
    () => /no unanswered message/.test(output.text()),
    "the answer to /retry with nothing to retry",
  );
  input.write("what went wrong?\r");
  await until(() => runEnds() === 1, "the failed turn");
  input.write("/retry\r");
  await until(() => runEnds() === 2, "the retried turn");
  input.write("/exit\r");
  assert.equal(await chat, 0);

  const shown = plain(output.text());
  assert.match(shown, /retry it with \/retry/);
  assert.match(shown, /the retried answer/);
  assert.deepEqual((await h.store.messages(keyOf("repl-2", "local"))).map((m) => [m.role, m.content]), [
    ["user", "what went wrong?"],
    ["assistant", "the retried answer"],
  ]);
  assert.equal((await h.store.get(keyOf("repl-2", "local")))!.turnCount, 1);
});
