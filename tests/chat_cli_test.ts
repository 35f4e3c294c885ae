/** The chat task end to end: `deno task chat` as a subprocess, piped stdin, a fake provider on 127.0.0.1. */
import assert from "node:assert/strict";
import { SqliteStore } from "../src/store/sqlite.ts";
import { startFakeProvider } from "./fixtures/fake_openai.ts";
import { childEnv, ROOT, runProcess, tempDir } from "./_harness.ts";
import { freePort } from "../scripts/_bench_process.ts";

function chat(args: string[], stdin: string, env: Record<string, string>) {
  return runProcess("deno", ["task", "--quiet", "chat", ...args], { env, stdin, clearEnv: true });
}

function baseEnv(dir: string, url: string): Record<string, string> {
  return childEnv(dir, { OPENAI_BASE_URL: url });
}

Deno.test("deno task chat answers piped questions through the calculator and remembers after a restart", async () => {
  using dir = tempDir();
  const provider = startFakeProvider();
  try {
    const env = baseEnv(dir.path, provider.url);
    const first = await chat(["--session", "cli-1"], "what is 12*(3+4)?\nhello there\n", env);
    assert.equal(first.code, 0, first.stderr);
    assert.equal(first.stdout, "The answer is 84.\necho: hello there\n");
    assert.equal(provider.requests.length, 3);

    // A new process on the same database sends the earlier turns back to the model.
    const second = await chat(["--session", "cli-1"], "and now?\n", env);
    assert.equal(second.code, 0, second.stderr);
    const history = (provider.requests.at(-1)!.messages as { role: string; content: string | null }[])
      .filter((m) => m.role === "user").map((m) => m.content);
    assert.deepEqual(history, ["what is 12*(3+4)?", "hello there", "and now?"]);

    const trace = Deno.readTextFileSync(`${dir.path}/trace/traces.jsonl`).trim().split("\n").map((l) =>
      JSON.parse(l)
    );
    const runs = trace.filter((e) => e.event === "run_end");
    assert.deepEqual(runs.map((e) => e.turn), [1, 2, 3]);
    assert.deepEqual(runs.map((e) => e.data.outcome), ["answered", "answered", "answered"]);
  } finally {
    await provider.close();
  }
});

Deno.test("deno task chat --user bob --session default is bob's own session when local has a default too", async () => {
  using dir = tempDir();
  const provider = startFakeProvider();
  try {
    const env = baseEnv(dir.path, provider.url);
    const local = await chat(["--session", "default"], "local's note\n", env);
    assert.equal(local.code, 0, local.stderr);

    const bob = await chat(["--user", "bob", "--session", "default"], "hello from bob\n", env);
    assert.equal(bob.code, 0, bob.stderr);
    assert.equal(bob.stdout, "echo: hello from bob\n");
    const sent = (provider.requests.at(-1)!.messages as { role: string; content: string | null }[])
      .filter((m) => m.role === "user").map((m) => m.content);
    assert.deepEqual(sent, ["hello from bob"], "bob's history is his own");

    const store = new SqliteStore(`${dir.path}/db/sessions.db`);
    try {
      for (const [user, note] of [["local", "local's note"], ["bob", "hello from bob"]]) {
        const key = { userId: user, sessionId: "default" };
        assert.equal((await store.get(key))?.turnCount, 1, user);
        assert.deepEqual((await store.messages(key)).filter((m) => m.role === "user").map((m) => m.content), [
          note,
        ]);
      }
    } finally {
      await store.close();
    }
    const trace = Deno.readTextFileSync(`${dir.path}/trace/traces.jsonl`).trim().split("\n").map((l) =>
      JSON.parse(l)
    );
    assert.deepEqual(
      trace.filter((e) => e.event === "run_end").map((e) => [e.user_id, e.session_id, e.turn]),
      [["local", "default", 1], ["bob", "default", 1]],
    );
  } finally {
    await provider.close();
  }
});

Deno.test("deno task chat stops with exit 2 and one clear line when the key is missing for a remote host", async () => {
  using dir = tempDir();
  const env = baseEnv(dir.path, "https://api.example.com/v1");
  const result = await chat([], "this must not be read\n", env);
  assert.equal(result.code, 2);
  assert.equal(result.stdout, "");
  assert.match(
    result.stderr,
    /Missing OPENAI_API_KEY: https:\/\/api\.example\.com\/v1 is not a loopback address/,
  );
  assert.ok(
    !(await Array.fromAsync(Deno.readDir(dir.path))).some((e) => e.name === "db"),
    "no work was done",
  );
});

Deno.test("deno task chat rejects a bad variable with exit 2 naming it", async () => {
  using dir = tempDir();
  const env = childEnv(dir.path, { OPENAI_BASE_URL: "http://127.0.0.1:9/v1", AGENT_MAX_TOOL_ITERS: "zero" });
  const result = await chat([], "", env);
  assert.equal(result.code, 2);
  assert.equal(
    result.stderr.trim(),
    'Invalid AGENT_MAX_TOOL_ITERS="zero": expected a whole number of 1 or more',
  );
});

Deno.test("deno task chat piped to a closed port: one stderr line per question, no retries, exit 1", async () => {
  using dir = tempDir();
  const port = freePort(); // nothing listens there
  const env = childEnv(dir.path, { OPENAI_BASE_URL: `http://127.0.0.1:${port}/v1` });
  const result = await chat(["--session", "down"], "hi\nagain\n", env);
  assert.equal(result.code, 1);
  assert.equal(result.stdout, "\n\n", "one (empty) answer line per question, no error text");
  const line = `! cannot connect to http://127.0.0.1:${port}: connection refused; your question is saved: ` +
    "/retry in deno task chat --session down sends it again";
  assert.deepEqual(result.stderr.trim().split("\n"), [line, line]);
  const trace = Deno.readTextFileSync(`${dir.path}/trace/traces.jsonl`).trim().split("\n").map((l) =>
    JSON.parse(l)
  );
  assert.deepEqual(trace.filter((e) => e.event === "error").map((e) => e.data.retries), [0, 0]);
});

Deno.test("deno task chat --help documents the flags, the sessions of one-shots and every variable", async () => {
  using dir = tempDir();
  const result = await chat(["--help"], "", baseEnv(dir.path, "http://127.0.0.1:9/v1"));
  assert.equal(result.code, 0);
  for (
    const word of [
      "--session",
      "-c, --continue",
      "-v, --verbose",
      "--demo",
      "a fresh session",
      "--user",
      "OPENAI_API_KEY",
      "AGENT_TRACE_MAX_PAYLOAD_CHARS",
      "AGENT_REASONING_EFFORT",
      "OTEL_DENO",
      "--env-file",
      "not sent to the model",
    ]
  ) {
    assert.ok(result.stdout.includes(word), word);
  }
});

Deno.test("deno task chat --bogus names the unknown option plainly, exit 2", async () => {
  using dir = tempDir();
  for (const flag of ["--bogus", "-x"]) {
    const result = await chat([flag], "", baseEnv(dir.path, "http://127.0.0.1:9/v1"));
    assert.equal(result.code, 2);
    assert.equal(result.stderr, `Unknown option ${flag}. Run with --help for usage.\n`);
  }
});

Deno.test("deno task chat prints streamed text as it arrives, before the turn ends", async () => {
  using dir = tempDir();
  const provider = startFakeProvider();
  let release!: () => void;
  provider.hold = new Promise((resolve) => (release = resolve));
  try {
    const child = new Deno.Command("deno", {
      args: ["task", "--quiet", "chat"],
      cwd: ROOT,
      env: { NO_COLOR: "1", ...baseEnv(dir.path, provider.url) },
      clearEnv: true,
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const writer = child.stdin.getWriter();
    await writer.write(new TextEncoder().encode("hello there\n"));
    await writer.close();
    const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
    let seen = "";
    while (!seen.includes("echo:")) {
      const { value, done } = await reader.read();
      if (done) break;
      seen += value;
    }
    // The provider is still holding the rest of the answer: what we saw is the first delta alone.
    assert.equal(seen, "echo: ");
    release();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      seen += value;
    }
    const { code } = await child.status;
    await child.stderr.cancel();
    assert.equal(code, 0);
    assert.equal(seen, "echo: hello there\n");
    assert.equal(provider.requests[0].stream, true);
  } finally {
    release();
    await provider.close();
  }
});

Deno.test("deno task chat with AGENT_STREAM=0 asks for the whole reply at once", async () => {
  using dir = tempDir();
  const provider = startFakeProvider();
  try {
    const env = childEnv(dir.path, { OPENAI_BASE_URL: provider.url, AGENT_STREAM: "0" });
    const result = await chat([], "hello there\n", env);
    assert.equal(result.code, 0, result.stderr);
    assert.equal(result.stdout, "echo: hello there\n");
    assert.equal(provider.requests[0].stream, undefined);
  } finally {
    await provider.close();
  }
});
