/** The interactive REPL, driven through in-memory streams as a terminal would drive it. */
import assert from "node:assert/strict";
import { PassThrough } from "node:stream";
import { runChat } from "../src/cli/chat.ts";
import { LlmError } from "../src/errors.ts";
import type { ChatOptions, LLM } from "../src/llm/llm.ts";
import type { ChatReply, Message } from "../src/types.ts";
import { type Agent, runTurn } from "../src/agent/loop.ts";
import { parseApprovalPolicy } from "../src/approval/policy.ts";
import { APPROVAL_PROMPT } from "../src/cli/approval_prompt.ts";
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
    store: h.store,
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
  const { input, output, status, exit: chat, runEnds } = startRepl(h, "repl-2");
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
  assert.doesNotMatch(shown, /503/, "the error is not printed as an answer");
  assert.match(shown, /the retried answer/);
  // One stats line, the retried answer's: the failed turn's line is its error, with no "0 model calls".
  assert.deepEqual(shown.match(/\d+ model calls?/g), ["1 model call"]);
  // Said once, on the status stream, in one line with the chat's way to retry (not the HTTP route's).
  const errors = plain(status.text()).split(/\r?\n|\r/).filter((line) => line.includes("503"));
  assert.deepEqual(errors, [
    "! LLM request failed: HTTP 503 from provider.test; your question is saved: /retry sends it again",
  ]);
  assert.deepEqual((await h.store.messages(keyOf("repl-2", "local"))).map((m) => [m.role, m.content]), [
    ["user", "what went wrong?"],
    ["assistant", "the retried answer"],
  ]);
  assert.equal((await h.store.get(keyOf("repl-2", "local")))!.turnCount, 1);
});

Deno.test("the REPL asks for approval at its own prompt, not at a plain you> prompt", async () => {
  using h = harness([
    { toolCalls: [{ name: "todo", arguments: { action: "add", text: "milk" }, id: "t1" }] },
    { content: "Added milk." },
  ]);
  h.agent.approval = parseApprovalPolicy({ tools: { todo: "ask" } });
  const { input, output, exit: chat, runEnds } = startRepl(h, "repl-3");
  input.write("add milk\r");
  await until(() => plain(output.text()).includes(APPROVAL_PROMPT), "the approval prompt");
  const asked = plain(output.text());
  const question = asked.lastIndexOf("Allow todo");
  assert.ok(question !== -1, asked);
  // After the question comes the approval's prompt; no you> until it is answered.
  assert.ok(!asked.slice(question).includes("you> "), JSON.stringify(asked.slice(question)));
  input.write("y\r");
  await until(() => runEnds() === 2, "the resumed turn");
  await until(() => plain(output.text()).includes("Added milk."), "the answer");
  input.write("/exit\r");
  assert.equal(await chat, 0);
  assert.match(plain(output.text()), /Added milk\./);
  assert.deepEqual((await h.store.listTodos(keyOf("repl-3", "local"))).map((t) => t.text), ["milk"]);
});

Deno.test("after /switch, /usage's last turn is the current session's, not the one left", async () => {
  using h = harness([
    {
      content: "a",
      usage: { promptTokens: 100, completionTokens: 20, totalTokens: 120, cachedTokens: null },
    },
    { content: "b", usage: { promptTokens: 7, completionTokens: 3, totalTokens: 10, cachedTokens: null } },
  ]);
  await runTurn({ ...keyOf("other", "local"), message: "earlier" }, h.agent, h.run);
  const { input, output, exit: chat, runEnds } = startRepl(h, "repl-4");
  input.write("hello\r");
  await until(() => runEnds() === 2, "the turn");
  const said = () => plain(output.text());
  input.write("/usage\r");
  await until(() => /last turn: 10 tokens/.test(said()), "the last turn of repl-4");
  input.write("/switch other\r");
  await until(() => /now in session other/.test(said()), "the switch");
  input.write("/usage\r");
  await until(() => /this session \(other\)/.test(said()), "/usage in other");
  input.write("/exit\r");
  assert.equal(await chat, 0);
  const usage = said().slice(said().indexOf("this session (other)"));
  assert.match(usage, /last turn: none yet in this session/);
  assert.doesNotMatch(usage, /last turn: 10 tokens/);
});
