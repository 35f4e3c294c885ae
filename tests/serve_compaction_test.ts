/**
 * `deno task serve` and a background compaction at shutdown: SIGTERM waits for one still running, or after
 * AGENT_SHUTDOWN_GRACE_SECONDS abandons it with the session unchanged. Against the fake provider, no network.
 */
import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import { freePort } from "../scripts/_bench_process.ts";
import { childEnv, SERVE_ARGS, spawnServe, tempDir } from "./_harness.ts";
import { until } from "./_http_harness.ts";
import { startFakeProvider } from "./fixtures/fake_openai.ts";

async function post(port: number, message: string): Promise<Record<string, unknown>> {
  const response = await fetch(`http://127.0.0.1:${port}/v1/sessions/s1/messages`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ message }),
  });
  assert.equal(response.status, 200);
  return await response.json();
}

for (const wait of [true, false]) {
  const name = wait
    ? "serve stopped during a background compaction waits for it: stored, traced, exit 0"
    : "serve abandons a background compaction after the shutdown grace: session unchanged, exit 0";
  Deno.test(name, async () => {
    using dir = tempDir();
    const provider = startFakeProvider();
    let release!: () => void;
    provider.holdSummary = new Promise((resolve) => (release = resolve));
    const port = freePort();
    const env = childEnv(dir.path, {
      AGENT_PORT: String(port),
      OPENAI_BASE_URL: provider.url,
      AGENT_MAX_RAW_TURNS: "1",
      AGENT_COMPACT_BATCH: "0",
      AGENT_SHUTDOWN_GRACE_SECONDS: wait ? "30" : "0.3",
      NO_COLOR: "1",
    });
    const serve = spawnServe(SERVE_ARGS, env);
    try {
      await serve.listening;
      await post(port, "hello");
      assert.equal((await post(port, "again")).outcome, "answered", "answered before any summary");
      await until(() => provider.requests.length === 3, "the summary request");
      const stopped = serve.stop();
      await until(() => /finishing 1 background compaction/.test(serve.stderr()), "the shutdown line");
      // The server waits for the compaction now, as its line says: let the summary come.
      if (wait) release();
      assert.equal(await stopped, 0, serve.stderr());
    } finally {
      release();
      await serve.stop();
      await provider.close();
    }
    const trace = Deno.readTextFileSync(`${dir.path}/trace/traces.jsonl`).trim().split("\n")
      .map((line) => JSON.parse(line));
    const compact = trace.filter((e) => e.event === "compact");
    assert.equal(compact.length, 1);
    assert.equal(compact[0].turn, 2);
    assert.equal(compact[0].data.background, true);
    assert.equal(compact[0].data.ok, wait);
    if (!wait) assert.match(compact[0].data.reason, /shutting down/);
    const db = new DatabaseSync(`${dir.path}/db/sessions.db`);
    try {
      const contents = db.prepare("SELECT content FROM messages WHERE role = 'user' ORDER BY rowid").all()
        .map((row) => row.content);
      const session = db.prepare("SELECT summary, turn_count, compacted_turns FROM sessions").get()!;
      assert.deepEqual(contents, wait ? ["again"] : ["hello", "again"]);
      assert.equal(session.turn_count, 2);
      assert.equal(session.compacted_turns, wait ? 1 : 0);
      assert.equal(session.summary === null, !wait);
    } finally {
      db.close();
    }
  });
}
