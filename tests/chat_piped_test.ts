/** Piped chat (stdin not a terminal): one answer line per question, streamed or not. */
import assert from "node:assert/strict";
import { PassThrough } from "node:stream";
import { runChat } from "../src/cli/chat.ts";
import { readDialects, replayProvider } from "./_dialects.ts";
import { childEnv, harness, runProcess, tempDir, textSink } from "./_harness.ts";
import { REPL_HELP } from "../src/cli/commands.ts";
import { LlmError } from "../src/errors.ts";
import { startFakeProvider } from "./fixtures/fake_openai.ts";

/** Runs piped chat on `h`'s agent with `text` as stdin: its exit code, what it printed and its status lines. */
async function pipedChat(h: ReturnType<typeof harness>, sessionId: string, text: string) {
  const input = new PassThrough();
  const output = textSink();
  const status = textSink();
  const chat = runChat({
    sessionId,
    userId: "u",
    deps: h.agent,
    store: h.store,
    emit: h.run.emit,
    input,
    output: output.stream,
    status: status.stream,
    interactive: false,
  });
  input.end(text);
  return { code: await chat, output: output.text(), status: status.text() };
}

function userMessagesOf(request: Record<string, unknown>): (string | null)[] {
  return (request.messages as { role: string; content: string | null }[])
    .filter((m) => m.role === "user").map((m) => m.content);
}

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
  const { code, output, status } = await pipedChat(h, "piped", "what is 6*7?\nand now?\n");
  assert.equal(code, 0);
  assert.equal(output, "Let me compute that. 6*7 is 42.\nNothing to compute.\n");
  assert.equal(status, "");
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
      // Streamed or not, the text before the calls and the answer share the line.
      const line = `${before} ${answer}`;
      assert.equal(result.stdout, `${line}\n${line}\n`, `AGENT_STREAM=${stream}`);
      assert.equal(provider.requests.length, 4);
    } finally {
      await provider.close();
    }
  }
});

Deno.test("piped /commands are run, not sent to the model; each run is one fresh session", async () => {
  using dir = tempDir();
  const provider = startFakeProvider();
  try {
    const env = childEnv(dir.path, { OPENAI_BASE_URL: provider.url });
    const run = (stdin: string, args: string[] = []) =>
      runProcess("deno", ["task", "--quiet", "chat", "-v", ...args], { env, stdin, clearEnv: true });
    const first = await run("/help\nhello there\n/usage\n/session\nand again\n");
    assert.equal(first.code, 0, first.stderr);
    assert.deepEqual(provider.requests.map(userMessagesOf), [["hello there"], ["hello there", "and again"]]);
    assert.ok(first.stdout.startsWith(REPL_HELP), first.stdout);
    const session = /^session (chat-[0-9a-f]{8}) \(user local\)$/m.exec(first.stderr)?.[1];
    assert.ok(session, first.stderr);
    assert.match(first.stdout, /echo: hello there\n/);
    assert.match(first.stdout, new RegExp(`this session \\(${session}\\): .* over 1 model call`));
    assert.match(first.stdout, new RegExp(`session ${session} \\(user local\\), 1 turn\n`));

    // Another run starts another session; -c goes back to the last run's, /exit stops reading.
    await run("fresh\n");
    assert.deepEqual(userMessagesOf(provider.requests.at(-1)!), ["fresh"]);
    const continued = await run("/switch nowhere\nonce more\n/exit\nnever sent\n", ["-c"]);
    assert.equal(continued.code, 0, continued.stderr);
    assert.match(continued.stdout, /You have no session nowhere/);
    assert.deepEqual(userMessagesOf(provider.requests.at(-1)!), ["fresh", "once more"]);
    assert.equal(provider.requests.length, 4);
  } finally {
    await provider.close();
  }
});

Deno.test("piped /retry sends the saved question of a failed turn again", async () => {
  using h = harness([
    new LlmError("LLM request failed: HTTP 503 from provider.test", { kind: "http", status: 503 }),
    { content: "the retried answer" },
  ]);
  const { code, output, status } = await pipedChat(h, "p", "what went wrong?\n/retry\n");
  assert.equal(code, 1, "the failed turn still counts for the exit code");
  assert.equal(output, "\nthe retried answer\n");
  assert.equal(
    status,
    "! LLM request failed: HTTP 503 from provider.test; your question is saved: /retry in deno task chat " +
      "--session p sends it again\n",
  );
});
