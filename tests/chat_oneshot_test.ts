/** `deno task chat "message"` and `deno task chat -` as subprocesses: one turn, its answer, its exit code. */
import assert from "node:assert/strict";
import { oneShotMessage } from "../src/cli/chat.ts";
import { startFakeProvider } from "./fixtures/fake_openai.ts";
import { childEnv, runProcess, tempDir } from "./_harness.ts";

function chat(args: string[], stdin: string, env: Record<string, string>) {
  return runProcess("deno", ["task", "--quiet", "chat", ...args], { env, stdin, clearEnv: true });
}

function env(dir: string, url: string): Record<string, string> {
  return childEnv(dir, { OPENAI_BASE_URL: url });
}

function userMessages(request: Record<string, unknown>): (string | null)[] {
  return (request.messages as { role: string; content: string | null }[])
    .filter((m) => m.role === "user").map((m) => m.content);
}

Deno.test('deno task chat "message" prints the one answer and exits 0, reading no stdin', async () => {
  using dir = tempDir();
  const provider = startFakeProvider();
  try {
    const result = await chat(
      ["--session", "one", "what is 12*(3+4)?"],
      "never read\n",
      env(dir.path, provider.url),
    );
    assert.equal(result.code, 0, result.stderr);
    assert.equal(result.stdout, "The answer is 84.\n");
    assert.deepEqual(userMessages(provider.requests.at(-1)!), ["what is 12*(3+4)?"]);
    assert.ok(
      !(await Array.fromAsync(Deno.readDir(`${dir.path}/db`))).some((e) => e.name === "chat_history"),
      "a one-shot message is not input history",
    );
  } finally {
    await provider.close();
  }
});

Deno.test('deno task chat "message" exits 1 when the turn ends in error', async () => {
  using dir = tempDir();
  const result = await chat(["hi"], "", { ...env(dir.path, "http://127.0.0.1:9/v1"), LLM_RETRIES: "0" });
  assert.equal(result.code, 1);
  assert.match(result.stdout, /could not get an answer from the model/);
});

Deno.test('deno task chat - sends all of stdin as one message, and - "question" puts the question first', async () => {
  using dir = tempDir();
  const provider = startFakeProvider();
  try {
    const whole = await chat(
      ["--session", "a", "-"],
      "line one\nline two\n\nline four\n",
      env(dir.path, provider.url),
    );
    assert.equal(whole.code, 0, whole.stderr);
    assert.equal(provider.requests.length, 1, "one turn, not one per line");
    assert.deepEqual(userMessages(provider.requests[0]), ["line one\nline two\n\nline four"]);
    assert.equal(whole.stdout, "echo: line one\nline two\n\nline four\n");

    const asked = await chat(
      ["--session", "b", "--user", "bob", "-", "sum", "it up"],
      "# notes\nbuy milk\n",
      env(
        dir.path,
        provider.url,
      ),
    );
    assert.equal(asked.code, 0, asked.stderr);
    assert.deepEqual(userMessages(provider.requests.at(-1)!), ["sum it up\n\n# notes\nbuy milk"]);
  } finally {
    await provider.close();
  }
});

Deno.test("deno task chat - with empty stdin and no question says there is nothing to send, exit 2", async () => {
  using dir = tempDir();
  const result = await chat(["-"], "", env(dir.path, "http://127.0.0.1:9/v1"));
  assert.equal(result.code, 2);
  assert.match(result.stderr, /Nothing to send/);
});

Deno.test("oneShotMessage() joins the question, a blank line and the piped text, each alone when the other is empty", () => {
  assert.equal(oneShotMessage(["what", "is", "this?"], "ignored"), "what is this?");
  assert.equal(oneShotMessage(["-"], "  indented\ntext\n\n"), "  indented\ntext");
  assert.equal(oneShotMessage(["-", "why?"], "text\n"), "why?\n\ntext");
  assert.equal(oneShotMessage(["why?", "-"], "\n"), "why?");
  assert.equal(oneShotMessage(["-"], " \n"), "");
});
