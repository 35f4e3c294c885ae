/**
 * `serve` killed with SIGKILL mid-turn, then started again on the same SQLite database, on the same host and
 * with the task's own least-privilege flags: the new process takes the dead one's session lease at once
 * instead of waiting the 30 s it would take to expire. Against a loopback model that holds the first turn.
 */
import assert from "node:assert/strict";
import { freePort } from "../scripts/_bench_process.ts";
import { taskPermissionFlags } from "../src/permissions.ts";
import { childEnv, ROOT, spawnServe, tempDir } from "./_harness.ts";

/** A model that answers `echo: <message>` at once, except `hold`, which it answers only once released. */
function holdingModel() {
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let arrived!: () => void;
  const holding = new Promise<void>((resolve) => (arrived = resolve));
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, async (request) => {
    const body = await request.json();
    const text = String(body.messages.at(-1)?.content);
    if (text === "hold") {
      arrived();
      await released;
    }
    return Response.json({
      id: "c",
      object: "chat.completion",
      created: 0,
      model: body.model,
      choices: [{
        index: 0,
        message: { role: "assistant", content: `echo: ${text}` },
        finish_reason: "stop",
      }],
      usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
    });
  });
  return { url: `http://127.0.0.1:${server.addr.port}/v1`, holding, release, server };
}

/** A `serve` on `dir`'s database with exactly the flags `deno task serve` would give it. */
function serveTask(dir: string, modelUrl: string) {
  const env = childEnv(dir, { AGENT_PORT: String(freePort()), OPENAI_BASE_URL: modelUrl, AGENT_STREAM: "0" });
  const args = [
    "run",
    "--no-prompt",
    "--config",
    `${ROOT}/deno.json`,
    ...taskPermissionFlags(env, { task: "serve" }),
  ];
  return { serve: spawnServe([...args, "src/main.ts", "serve"], env), port: Number(env.AGENT_PORT) };
}

function postTurn(port: number, message: string, signal?: AbortSignal): Promise<Response> {
  return fetch(`http://127.0.0.1:${port}/v1/sessions/s1/messages`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ message }),
    signal,
  });
}

Deno.test("serve restarted after kill -9 mid-turn answers that session's next turn within 1 s, not after the lease", async () => {
  using dir = tempDir();
  const model = holdingModel();
  const first = serveTask(dir.path, model.url);
  let second: ReturnType<typeof serveTask> | undefined;
  try {
    await first.serve.listening;
    const cut = postTurn(first.port, "hold").then((r) => r.body?.cancel(), () => {}); // its answer never comes
    await model.holding; // the turn holds the session's lease, waiting for the model
    first.serve.child.kill("SIGKILL");
    assert.equal((await first.serve.child.status).signal, "SIGKILL");
    await cut;

    second = serveTask(dir.path, model.url);
    await second.serve.listening;
    // The dead process's lease has 30 s left; only a take from its gone holder answers within the second.
    const deadline = new AbortController();
    const timer = setTimeout(
      () => deadline.abort(new Error("no answer within 1 s of the first request")),
      1000,
    );
    try {
      const response = await postTurn(second.port, "after the crash", deadline.signal);
      const body = await response.json();
      assert.equal(response.status, 200, JSON.stringify(body));
      assert.equal(body.outcome, "answered");
      assert.match(JSON.stringify(body), /echo: after the crash/);
    } finally {
      clearTimeout(timer);
    }
  } finally {
    model.release();
    await first.serve.stop();
    if (second !== undefined) assert.equal(await second.serve.stop(), 0, second.serve.stderr());
    await model.server.shutdown();
  }
});
