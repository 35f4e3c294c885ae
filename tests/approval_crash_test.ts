/**
 * kill -9 while a turn awaits approval: the real `chat`, with its task's permission flags, killed at the
 * prompt, started again and answered; the turn completes and the crash invariants hold.
 */
import assert from "node:assert/strict";
import { checkCrashInvariants } from "../scripts/_crash_invariants.ts";
import { taskPermissionFlags } from "../src/permissions.ts";
import { SqliteStore } from "../src/store/sqlite.ts";
import { readTrace } from "../src/trace/trace.ts";
import { ROOT, tempDir } from "./_harness.ts";

/** A provider that calls `todo` for a user message and answers after a tool result. */
function startProvider(): Deno.HttpServer<Deno.NetAddr> {
  return Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, async (request) => {
    const body = await request.json();
    const last = body.messages.at(-1);
    const message = last.role === "tool" ? { role: "assistant", content: "Done: milk is on the list." } : {
      role: "assistant",
      content: null,
      tool_calls: [{
        id: "call_milk",
        type: "function",
        function: { name: "todo", arguments: '{"action":"add","text":"milk"}' },
      }],
    };
    return Response.json({
      id: "c",
      object: "chat.completion",
      model: "fake",
      choices: [{ index: 0, message, finish_reason: last.role === "tool" ? "stop" : "tool_calls" }],
      usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
    });
  });
}

function spawnChat(dir: string, env: Record<string, string>): Deno.ChildProcess {
  // Run from the temporary folder: the policy file is its mcp.json, readable with the task's own flags.
  const args = ["run", "--no-prompt", "--config", `${ROOT}/deno.json`, ...taskPermissionFlags(env)];
  return new Deno.Command(Deno.execPath(), {
    args: [...args, `${ROOT}/src/main.ts`, "chat", "--session", "s1"],
    cwd: dir,
    env,
    clearEnv: true,
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
}

Deno.test("kill -9 while a turn awaits approval: restarted and approved, the turn completes whole", async () => {
  using dir = tempDir();
  await using provider = startProvider();
  Deno.writeTextFileSync(`${dir.path}/mcp.json`, JSON.stringify({ approval: { tools: { todo: "ask" } } }));
  const dbPath = `${dir.path}/sessions.db`;
  const tracePath = `${dir.path}/traces.jsonl`;
  const env: Record<string, string> = {
    OPENAI_BASE_URL: `http://127.0.0.1:${provider.addr.port}/v1`,
    AGENT_DB_PATH: dbPath,
    AGENT_TRACE_PATH: tracePath,
    AGENT_HISTORY_PATH: `${dir.path}/history`,
    AGENT_STREAM: "0",
    NO_COLOR: "1",
  };
  for (const name of ["PATH", "HOME", "DENO_DIR"]) {
    const value = Deno.env.get(name);
    if (value) env[name] = value;
  }

  const first = spawnChat(dir.path, env);
  const writer = first.stdin.getWriter();
  await writer.write(new TextEncoder().encode("add milk to my list\n"));
  // Piped, the question is asked on stderr: stdout holds answers only.
  let seen = "";
  for await (const text of first.stderr.pipeThrough(new TextDecoderStream())) {
    seen += text;
    if (seen.includes("Allow todo")) break;
  }
  assert.match(seen, /Allow todo \{"action":"add","text":"milk"\}\? \[y\]es/);
  first.kill("SIGKILL");
  assert.equal((await first.status).signal, "SIGKILL");
  await writer.close().catch(() => {});
  assert.equal(await new Response(first.stdout).text(), "", "no answer yet, and no prompt among the answers");

  assert.deepEqual(await checkCrashInvariants(dbPath, tracePath), []);
  const key = { userId: "local", sessionId: "s1" };
  let store = new SqliteStore(dbPath);
  try {
    assert.equal((await store.pendingStep(key))?.asked[0], "call_milk", "the pending step survived");
    assert.deepEqual((await store.messages(key)).map((m) => m.role), ["user"]);
  } finally {
    await store.close();
  }

  const second = spawnChat(dir.path, env);
  const input = second.stdin.getWriter();
  await input.write(new TextEncoder().encode("y\n"));
  await input.close();
  const { code, stdout, stderr } = await second.output();
  const out = new TextDecoder().decode(stdout);
  assert.equal(code, 0, new TextDecoder().decode(stderr));
  assert.match(new TextDecoder().decode(stderr), /Allow todo/);
  assert.equal(out, "Done: milk is on the list.\n");

  assert.deepEqual(await checkCrashInvariants(dbPath, tracePath), []);
  store = new SqliteStore(dbPath);
  try {
    assert.equal(await store.pendingStep(key), null);
    const messages = await store.messages(key);
    assert.deepEqual(messages.map((m) => m.role), ["user", "assistant", "tool", "assistant"]);
    assert.deepEqual(messages.filter((m) => m.toolCallId === "call_milk").length, 1, "exactly one result");
    assert.deepEqual((await store.listTodos(key)).map((t) => t.text), ["milk"]);
    assert.equal((await store.get(key))!.turnCount, 1);
  } finally {
    await store.close();
  }
  const events = readTrace(tracePath);
  const requested = events.find((e) => e.event === "approval_requested")!;
  const decided = events.find((e) => e.event === "approval_decided")!;
  assert.equal(decided.run_id, requested.run_id, "the same run resumed");
  assert.deepEqual(decided.data.decisions, [{ id: "call_milk", name: "todo", decision: "approve" }]);
  assert.deepEqual(
    events.filter((e) => e.event === "run_end").map((e) => [e.run_id, e.data.outcome]),
    [[requested.run_id, "awaiting_approval"], [requested.run_id, "answered"]],
  );
});
