/** `deno task chat "message"` and `deno task chat -` as subprocesses: one turn, its answer, its exit code. */
import assert from "node:assert/strict";
import { oneShotMessage } from "../src/cli/chat.ts";
import { startFakeProvider } from "./fixtures/fake_openai.ts";
import { childEnv, runProcess, tempDir } from "./_harness.ts";
import { freePort } from "../scripts/_bench_process.ts";

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

Deno.test('deno task chat "message" to a closed port: exit 1, one stderr line naming the URL and cause, no retry', async () => {
  using dir = tempDir();
  const port = freePort(); // nothing listens there: connections are refused
  const result = await chat(["-v", "hi"], "", env(dir.path, `http://127.0.0.1:${port}/v1`));
  assert.equal(result.code, 1);
  assert.equal(result.stdout.trim(), "", "no error text where the answer goes");
  const lines = result.stderr.trim().split("\n");
  const session = /^session (chat-[0-9a-f]{8}) \(user local\)$/.exec(lines[0])?.[1];
  assert.ok(session, result.stderr);
  assert.deepEqual(lines.slice(1), [
    `! cannot connect to http://127.0.0.1:${port}: connection refused; your question is saved: ` +
    `/retry in deno task chat --session ${session} sends it again`,
  ]);
  // The default LLM_RETRIES (2) does not apply: a refused connection is tried once.
  const trace = Deno.readTextFileSync(`${dir.path}/trace/traces.jsonl`).trim().split("\n").map((l) =>
    JSON.parse(l)
  );
  const errors = trace.filter((e) => e.event === "error");
  assert.deepEqual(errors.map((e) => [e.data.kind, e.data.retries]), [["network", 0]]);
});

Deno.test("one-shots start a fresh session each; --session names one; -c continues the last one-shot's", async () => {
  using dir = tempDir();
  const provider = startFakeProvider();
  try {
    const e = env(dir.path, provider.url);
    const sessionOf = (stderr: string) => /^session (\S+) \(user local\)$/m.exec(stderr)?.[1];
    const first = await chat(["-v", "first"], "", e);
    assert.equal(first.code, 0, first.stderr);
    const second = await chat(["-v", "second"], "", e);
    assert.equal(second.code, 0, second.stderr);
    assert.deepEqual(userMessages(provider.requests.at(-1)!), ["second"], "a fresh session: no earlier turn");
    assert.notEqual(sessionOf(first.stderr), sessionOf(second.stderr));
    assert.match(sessionOf(first.stderr) ?? "", /^chat-[0-9a-f]{8}$/);

    const continued = await chat(["--continue", "-v", "third"], "", e);
    assert.equal(continued.code, 0, continued.stderr);
    assert.equal(sessionOf(continued.stderr), sessionOf(second.stderr));
    assert.deepEqual(userMessages(provider.requests.at(-1)!), ["second", "third"]);
    const short = await chat(["-c", "fourth"], "", e);
    assert.equal(short.code, 0, short.stderr);
    assert.equal(short.stderr, "", "without -v nothing is said about the session");
    assert.deepEqual(userMessages(provider.requests.at(-1)!), ["second", "third", "fourth"]);

    const named = await chat(["--session", "mine", "fifth"], "", e);
    assert.equal(named.code, 0, named.stderr);
    assert.deepEqual(userMessages(provider.requests.at(-1)!), ["fifth"]);
    const again = await chat(["--session", "mine", "sixth"], "", e);
    assert.deepEqual(userMessages(provider.requests.at(-1)!), ["fifth", "sixth"], again.stderr);
    // The last one-shot's session is the named one now, and -c is per user.
    const afterNamed = await chat(["-c", "-v", "seventh"], "", e);
    assert.equal(sessionOf(afterNamed.stderr), "mine");
    const bob = await chat(["--user", "bob", "-c", "hi"], "", e);
    assert.equal(bob.code, 2);
    assert.equal(
      bob.stderr.trim(),
      "Nothing to continue: no one-shot or piped chat of user bob yet; give --session ID",
    );
    const both = await chat(["--session", "x", "-c", "hi"], "", e);
    assert.equal(both.code, 2);
    assert.match(both.stderr, /^Cannot use --session and -c\/--continue together/);
  } finally {
    await provider.close();
  }
});

Deno.test("deno task chat --demo answers offline with the demo model, saying so on stderr", async () => {
  using dir = tempDir();
  // A base URL that could never be reached, and no key: the demo model needs neither.
  const e = env(dir.path, "https://api.example.invalid/v1");
  const sum = await chat(["--demo", "what is 12*(3+4)?"], "", e);
  assert.equal(sum.code, 0, sum.stderr);
  assert.equal(sum.stdout, "12*(3+4) = 84\n");
  assert.match(sum.stderr, /^demo model \(demo-rules\): offline rules, not an LLM/);
  const hello = await chat(["--demo", "-c", "hello"], "", e);
  assert.equal(hello.code, 0, hello.stderr);
  assert.match(hello.stdout, /^I am the offline demo model: rules, not an LLM\. I can do arithmetic/);
  const unknown = await chat(["--demo", "why is the sky blue?"], "", e);
  assert.match(unknown.stdout, /^I can't answer that\. I am the offline demo model/);
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

Deno.test("deno task chat -c with a last-session file that is not its own says so and what to do, exit 2", async () => {
  using dir = tempDir();
  const path = `${dir.path}/db/chat_history.last_session`;
  Deno.mkdirSync(`${dir.path}/db`, { recursive: true });
  Deno.writeTextFileSync(path, "not json");
  const result = await chat(["-c", "hi"], "", env(dir.path, "http://127.0.0.1:9/v1"));
  assert.equal(result.code, 2);
  assert.match(
    result.stderr,
    new RegExp(`^Cannot read the last chat session from ${path}: .+; delete it, or give --session ID\\n$`),
  );
  // A one-shot without -c replaces it.
  const provider = startFakeProvider();
  try {
    const fresh = await chat(["-v", "hello"], "", env(dir.path, provider.url));
    assert.equal(fresh.code, 0, fresh.stderr);
    const session = /^session (\S+)/.exec(fresh.stderr)?.[1];
    assert.deepEqual(JSON.parse(Deno.readTextFileSync(path)), { local: session });
    assert.equal(Deno.statSync(path).mode! & 0o777, 0o600);
  } finally {
    await provider.close();
  }
});
